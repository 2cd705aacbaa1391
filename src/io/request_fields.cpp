// The parsers of the request field table (request_fields.h): type, range and a message that
// quotes the offending value (clipped, so a hostile line cannot flood the log).
#include "io/request_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "core/json_text.h"

namespace tpllama::request_fields {
namespace {

using nlohmann::json;

// Integer within [lo, hi] (hi >= 0), without wrapping values beyond int64.
bool integer_in_range(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    *out = static_cast<int64_t>(u);
  } else {
    *out = v.get<int64_t>();
  }
  return *out >= lo && *out <= hi;
}

}  // namespace

void parse_max_tokens(const FieldInput& in, Request& req) {
  const json& object = in.object();
  const FieldSite& at = in.at();
  const json* v = find_field(object, "max_tokens");
  const char* key = "max_tokens";
  if (const json* newer = find_field(object, "max_completion_tokens")) {
    if (v)
      reject(at, "fields '", at.name("max_tokens"), "' and '", at.name("max_completion_tokens"),
             "' are both given: use one");
    v = newer;
    key = "max_completion_tokens";
  }
  if (!v) return;
  const std::string name = at.name(key);
  if (!v->is_number_integer() ||
      v->get<double>() < 1)  // parsed 0 is unsigned, so compare as double
    reject(at, "field '", name, "' must be an integer >= 1, got ", describe_json(*v));
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  int64_t n = 0;
  if (!integer_in_range(*v, 1, kMax, &n))
    reject(at, "field '", name, "' must be at most ", kMax, ", got ", describe_json(*v));
  req.max_tokens = static_cast<int>(n);
}

namespace {

// A number satisfying ok(); expected names the accepted range in the message.
template <typename Pred>
void parse_number(const json& object, const char* key, const FieldSite& at, const char* expected,
                  Pred ok, double& out) {
  const json* v = find_field(object, key);
  if (!v) return;
  double d = v->is_number() ? v->get<double>() : 0.0;
  if (!v->is_number() || !std::isfinite(d) || !ok(d))
    reject(at, "field '", at.name(key), "' must be ", expected, ", got ", describe_json(*v));
  out = d;
}

}  // namespace

void parse_top_k(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  SamplingParams& s = req.sampling;
  const json* v = find_field(in.object(), "top_k");
  if (!v) return;
  if (!v->is_number_integer())
    reject(at, "field '", at.name("top_k"), "' must be an integer, got ", describe_json(*v));
  // Beyond int range only "off" (<= 0) or "keep everything" make sense, so clamp rather than fail.
  constexpr int kMax = std::numeric_limits<int>::max();
  if (v->is_number_unsigned()) {
    s.top_k = static_cast<int>(std::min<uint64_t>(v->get<uint64_t>(), kMax));
  } else {
    int64_t k = v->get<int64_t>();
    s.top_k = k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(k, kMax));
  }
}

void parse_seed(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  SamplingParams& s = req.sampling;
  const json* v = find_field(in.object(), "seed");
  if (!v) return;
  if (v->is_number_unsigned()) {
    s.seed = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    s.seed = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    reject(at, "field '", at.name("seed"), "' must be an integer between 0 and 2^64-1, got ",
           describe_json(*v));
  }
}

void parse_stop(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  const json* v = find_field(in.object(), "stop");
  if (!v) {
    req.stop.clear();
    return;
  }
  std::vector<std::string> stop;
  auto bad = [&] {
    reject(at, "field '", at.name("stop"), "' must be a string or a list of strings, got ",
           describe_json(*v));
  };
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& s : *v) {
      if (!s.is_string()) bad();
      stop.push_back(s.get<std::string>());
    }
  } else {
    bad();
  }
  // An empty stop string would match before the first token and end every request at once.
  std::erase(stop, std::string());
  req.stop = std::move(stop);
}

namespace {
LogprobsSyntax logprobs_syntax(Taker taker) {
  if (taker == kBatchChat) return LogprobsSyntax::kChat;
  return taker == kBatchCompletion ? LogprobsSyntax::kIntegerOnly : LogprobsSyntax::kIntegerOrBool;
}
}  // namespace

// JSONL also takes true/false (true: the chosen token only); the completions body takes integers
// only; the chat body takes "logprobs": true|false and "top_logprobs": 0..20 (with logprobs true).
void parse_logprobs(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  const LogprobsSyntax syntax = logprobs_syntax(in.taker());
  const json* v = find_field(in.object(), "logprobs");
  if (syntax == LogprobsSyntax::kChat) {
    if (v && !v->is_boolean())
      reject(at, "field '", at.name("logprobs"), "' must be true or false, got ",
             describe_json(*v));
    req.logprobs = v && v->get<bool>() ? 0 : -1;
    return;
  }
  if (!v) return;
  if (v->is_boolean() && syntax == LogprobsSyntax::kIntegerOrBool) {
    req.logprobs = v->get<bool>() ? 0 : -1;
    return;
  }
  int64_t n = 0;
  if (!integer_in_range(*v, 0, kMaxLogprobs, &n)) {
    const char* also = syntax == LogprobsSyntax::kIntegerOrBool ? " or a boolean" : "";
    reject(at, "field '", at.name("logprobs"), "' must be an integer in [0, ", kMaxLogprobs, "]",
           also, ", got ", describe_json(*v));
  }
  req.logprobs = static_cast<int>(n);
}

// The chat body's "top_logprobs": 0..20 alternatives to each chosen token, with "logprobs": true.
void parse_top_logprobs(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  const json* top = find_field(in.object(), "top_logprobs");
  if (!top) return;
  int64_t n = 0;
  if (!integer_in_range(*top, 0, kMaxLogprobs, &n))
    reject(at, "field '", at.name("top_logprobs"), "' must be an integer in [0, ", kMaxLogprobs,
           "], got ", describe_json(*top));
  if (req.logprobs < 0)
    reject(at, "field '", at.name("top_logprobs"), "' needs '", at.name("logprobs"), "': true");
  req.logprobs = static_cast<int>(n);
}

namespace {

bool parse_bool(const json& object, const char* key, const FieldSite& at, bool fallback) {
  const json* v = find_field(object, key);
  if (!v) return fallback;
  if (!v->is_boolean())
    reject(at, "field '", at.name(key), "' must be true or false, got ", describe_json(*v));
  return v->get<bool>();
}

// A token id: an integer in [0, 2^31).
int32_t parse_token_id(const json& v, const FieldSite& at, const std::string& where) {
  int64_t id = 0;
  if (!integer_in_range(v, 0, std::numeric_limits<int32_t>::max(), &id))
    reject(at, "field '", where, "' must be a token id (an integer >= 0), got ", describe_json(v));
  return static_cast<int32_t>(id);
}

// OpenAI's "logit_bias": {"token id": bias in [-100, 100]}, ids as decimal strings (JSON keys).
std::vector<std::pair<int32_t, float>> logit_bias(const json& object, const FieldSite& at) {
  const json* v = find_field(object, "logit_bias");
  if (!v) return {};
  const std::string name = at.name("logit_bias");
  if (!v->is_object())
    reject(at, "field '", name, "' must be an object of token id → bias, got ", describe_json(*v));
  std::vector<std::pair<int32_t, float>> bias;
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long long id = digits ? std::stoll(key) : -1;
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      reject(at, "field '", name, "' has the key ", describe_json(json(key)),
             ": keys must be token ids (decimal integers >= 0)");
    const double b = it->is_number() ? it->get<double>() : NAN;
    if (!(b >= -100.0 && b <= 100.0))
      reject(at, "field '", name, "[\"", key, "\"]' must be a number in [-100, 100], got ",
             describe_json(*it));
    bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  std::sort(bias.begin(), bias.end());
  for (size_t i = 1; i < bias.size(); ++i)
    if (bias[i].first == bias[i - 1].first)
      reject(at, "field '", name, "' names token ", bias[i].first, " twice");
  return bias;
}

std::vector<int32_t> stop_token_ids(const json& object, const FieldSite& at) {
  const json* v = find_field(object, "stop_token_ids");
  if (!v) return {};
  const std::string name = at.name("stop_token_ids");
  if (!v->is_array())
    reject(at, "field '", name, "' must be a list of token ids, got ", describe_json(*v));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v->size(); ++i)
    ids.push_back(parse_token_id((*v)[i], at, name + "[" + std::to_string(i) + "]"));
  return ids;
}

// A message's content as chat templates expect it: a string (or null); OpenAI's list of text parts
// becomes their texts joined with newlines.
void normalize_content(nlohmann::ordered_json& message, const FieldSite& at, size_t index) {
  auto content = message.find("content");
  if (content == message.end() || content->is_null() || content->is_string()) return;
  const std::string where = at.name("messages") + "[" + std::to_string(index) + "].content";
  if (!content->is_array())
    reject(at, "field '", where, "' must be a string, null or a list of text parts, got ",
           describe_json(json(*content)));
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const auto& part = (*content)[i];
    const bool is_text = part.is_object() && part.value("type", json(nullptr)) == "text" &&
                         part.contains("text") && part["text"].is_string();
    if (!is_text)
      reject(at, "field '", where, "[", i,
             "]' must be {\"type\": \"text\", \"text\": string} (only text is supported), got ",
             describe_json(json(part)));
    if (i > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  *content = text;
}

}  // namespace

// "documents" (vLLM's and Hugging Face's, for retrieval-augmented templates): a list of objects,
// the template's `documents` variable; the field named for it wins over a "documents" key of
// chat_template_kwargs.
void parse_documents(const FieldInput& in, Request& req) {
  const nlohmann::ordered_json& object = in.ordered();
  const FieldSite& at = in.at();
  auto documents = object.find("documents");
  if (documents == object.end() || documents->is_null()) return;
  const std::string name = at.name("documents");
  if (!documents->is_array())
    reject(at, "field '", name, "' must be a list of objects, got ",
           describe_json(json(*documents)));
  for (size_t i = 0; i < documents->size(); ++i)
    if (!(*documents)[i].is_object())
      reject(at, "field '", name, "[", i, "]' must be an object, got ",
             describe_json(json((*documents)[i])));
  req.chat_variables["documents"] = *documents;
}

namespace {
bool parse_chat_bool(const nlohmann::ordered_json& object, const char* key, const FieldSite& at,
                     bool fallback) {
  auto v = object.find(key);
  if (v == object.end() || v->is_null()) return fallback;
  if (!v->is_boolean())
    reject(at, "field '", at.name(key), "' must be true or false, got ", describe_json(json(*v)));
  return v->get<bool>();
}

}  // namespace

// add_generation_prompt (default true) and continue_final_message (default false). Continuing
// needs an assistant message with text last, and add_generation_prompt false said outright: vLLM
// refuses both true, and Hugging Face refuses continue_final_message beside vLLM's default true.
void parse_generation_prompt(const FieldInput& in, Request& req) {
  const nlohmann::ordered_json& object = in.ordered();
  const FieldSite& at = in.at();
  req.add_generation_prompt = parse_chat_bool(object, "add_generation_prompt", at, true);
  req.continue_final_message = parse_chat_bool(object, "continue_final_message", at, false);
  if (!req.continue_final_message) return;
  const std::string field = at.name("continue_final_message");
  if (req.add_generation_prompt) {
    const auto given = object.find("add_generation_prompt");
    if (given != object.end() && !given->is_null())
      reject(at, "fields '", field, "' and '", at.name("add_generation_prompt"),
             "' are both true: a continued message opens no new turn, so use one");
    reject(at, "field '", field, "' is true but '", at.name("add_generation_prompt"),
           "' is not given, and it is true by default: give it as false (as vLLM requires)");
  }
  const nlohmann::ordered_json& last = req.messages->back();
  const std::string where =
      at.name("messages") + "[" + std::to_string(req.messages->size() - 1) + "]";
  if (last["role"] != "assistant")
    reject(at, "field '", field, "' is true but the last message ('", where, "') has role ",
           describe_json(json(last["role"])), ": only an assistant message can be continued");
  const auto content = last.find("content");
  if (content == last.end() || !content->is_string())
    reject(at, "field '", field, "' is true but the last message ('", where,
           "') has no text content to continue");
}

const json* find_field(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string parser_message(const json::exception& e) {
  // Drop the "[json.exception.parse_error.101] " tag; and the parser only ever sees one line, so
  // its "line 1, " is noise next to our own line number.
  std::string msg = e.what();
  if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
  const std::string noise = "parse error at line 1, ";
  if (msg.rfind(noise, 0) == 0) msg = "parse error at " + msg.substr(noise.size());
  return msg.size() > 2 * kMaxShownChars ? msg.substr(0, 2 * kMaxShownChars) + "..." : msg;
}

bool parse_object_line(const std::string& line, json& object, Request& req) {
  if (std::optional<std::string> deep = json_depth_error(line, kMaxLineJsonValues)) {
    req.error = detail::concat("line ", req.line, ": not read: ", *deep);
    return false;
  }
  // A key given twice in one object: parsers disagree on which counts (this one keeps the last, the
  // ordered one a chat is read again with the first), so it is refused, but inside a field that
  // changes nothing (metadata) where it does not matter.
  std::vector<std::set<std::string>> keys;  // of each object open
  std::vector<std::string> path;            // the key at each depth
  std::string twice, in_field;
  const auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event != json::parse_event_t::key || !twice.empty()) return true;
    const std::string& key = parsed.get_ref<const std::string&>();
    path.resize(static_cast<size_t>(std::max(depth, 1)));
    path.back() = key;
    if (keys.back().insert(key).second) return true;
    // The request's field the key is in: the line's own, or its batch body's.
    const size_t top = path.size() > 1 && path[0] == "body" ? 1 : 0;
    const RequestField* field = find_request_field(path[top]);
    if (field != nullptr && field->neutral == kAnyValue) return true;
    twice = key;
    if (path.size() > top + 1) in_field = path[top];
    return true;
  };
  try {
    object = json::parse(line, callback);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    req.error = detail::concat("line ", req.line, ": not valid JSON: ", parser_message(e));
    return false;
  }
  if (!twice.empty()) {
    req.error = detail::concat("line ", req.line, ": not read: the key ",
                               describe_json(json(twice)), " is given twice in one object",
                               in_field.empty() ? "" : " (in field '" + in_field + "')",
                               ", and readers differ on which counts");
    return false;
  }
  if (!object.is_object()) {
    req.error =
        detail::concat("line ", req.line, ": expected a JSON object, got ", object.type_name());
    return false;
  }
  return true;
}

bool parse_token_ids(const json& v, const FieldSite& at, const char* key, Request& req) {
  if (!v.is_array()) return false;
  if (v.empty()) reject(at, "field '", at.name(key), "' is an empty list: no token to start from");
  req.token_ids.clear();
  req.token_ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& id = v[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      reject(at, "field '", at.name(key),
             "' must be a string or a list of token ids (integers >= 0); element ", i, " is ",
             describe_json(id));
    req.token_ids.push_back(static_cast<int>(id.get<int64_t>()));
  }
  return true;
}

const nlohmann::ordered_json& FieldInput::ordered() const {
  if (!ordered_) {
    nlohmann::ordered_json whole = nlohmann::ordered_json::parse(line_);
    ordered_ = in_body_ ? std::move(whole.at("body")) : std::move(whole);
  }
  return *ordered_;
}

void parse_id(const FieldInput& in, Request& req) {
  const json* v = find_field(in.object(), "id");
  if (!v) {
    req.id = json(in.at().line);
    return;
  }
  if (!v->is_string() && !v->is_number_integer())
    reject(in.at(), "field 'id' must be a string or an integer, got ", describe_json(*v));
  req.id = *v;
}

namespace {

// A JSONL prompt: a string, or a list of token ids (into req.token_ids).
void parse_line_prompt(const json& object, const FieldSite& at, Request& req) {
  auto it = object.find("prompt");
  if (it == object.end()) reject(at, "missing required field 'prompt'");
  if (parse_token_ids(*it, at, "prompt", req)) return;
  if (!it->is_string())
    reject(at, "field 'prompt' must be a string or a list of token ids, got ", describe_json(*it));
  req.prompt = it->get<std::string>();
}

// A batch body's: a string, a list of one string, a list of token ids or a list of one such list
// (the completions API's four forms of one prompt); token ids go to req.token_ids.
void parse_body_prompt(const json& body, const FieldSite& at, Request& req) {
  auto it = body.find("prompt");
  if (it == body.end()) reject(at, "missing required field 'body.prompt'");
  if (it->is_string()) {
    req.prompt = it->get<std::string>();
    return;
  }
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    req.prompt = (*it)[0].get<std::string>();
    return;
  }
  if (it->is_array() && it->size() == 1 && (*it)[0].is_array()) {
    if (parse_token_ids((*it)[0], at, "prompt", req)) return;
  } else if (it->is_array() && (it->empty() || (*it)[0].is_number())) {
    if (parse_token_ids(*it, at, "prompt", req)) return;
  }
  reject(
      at,
      "field 'body.prompt' must be a string, a list of token ids, or a list of one of either, got ",
      describe_json(*it));
}

std::string required_string(const json& object, const FieldSite& at, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) reject(at, "missing required field '", key, "'");
  if (!it->is_string()) reject(at, "field '", key, "' must be a string, got ", describe_json(*it));
  return it->get<std::string>();
}

}  // namespace

void parse_prompt(const FieldInput& in, Request& req) {
  if (in.taker() == kBatchCompletion)
    parse_body_prompt(in.object(), in.at(), req);
  else
    parse_line_prompt(in.object(), in.at(), req);
}

void parse_context(const FieldInput& in, Request& req) {
  req.context = required_string(in.object(), in.at(), "context");
}

void parse_continuation(const FieldInput& in, Request& req) {
  req.continuation = required_string(in.object(), in.at(), "continuation");
  if (req.continuation.empty())
    reject(in.at(), "field 'continuation' is empty: there is nothing to score");
}

void parse_messages(const FieldInput& in, Request& req) {
  const nlohmann::ordered_json& object = in.ordered();
  const FieldSite& at = in.at();
  auto messages = object.find("messages");
  if (messages == object.end() || messages->is_null())
    reject(at, "missing required field '", at.name("messages"), "'");
  if (!messages->is_array() || messages->empty())
    reject(at, "field '", at.name("messages"), "' must be a non-empty list of messages, got ",
           describe_json(json(*messages)));
  nlohmann::ordered_json list = *messages;
  for (size_t i = 0; i < list.size(); ++i) {
    nlohmann::ordered_json& m = list[i];
    const std::string where = at.name("messages") + "[" + std::to_string(i) + "]";
    if (!m.is_object())
      reject(at, "field '", where, "' must be an object, got ", describe_json(json(m)));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      reject(at, "field '", where, ".role' must be a string, got ",
             role == m.end() ? std::string("nothing") : describe_json(json(*role)));
    normalize_content(m, at, i);
  }
  req.messages = std::move(list);
}

void parse_tools(const FieldInput& in, Request& req) {
  const nlohmann::ordered_json& object = in.ordered();
  if (auto tools = object.find("tools"); tools != object.end() && !tools->is_null()) {
    if (!tools->is_array())
      reject(in.at(), "field '", in.at().name("tools"), "' must be a list, got ",
             describe_json(json(*tools)));
    req.chat_variables["tools"] = *tools;
  }
}

void parse_chat_template_kwargs(const FieldInput& in, Request& req) {
  const nlohmann::ordered_json& object = in.ordered();
  if (auto kwargs = object.find("chat_template_kwargs");
      kwargs != object.end() && !kwargs->is_null()) {
    if (!kwargs->is_object())
      reject(in.at(), "field '", in.at().name("chat_template_kwargs"), "' must be an object, got ",
             describe_json(json(*kwargs)));
    for (auto it = kwargs->begin(); it != kwargs->end(); ++it)
      req.chat_variables[it.key()] = it.value();
  }
}

void parse_temperature(const FieldInput& in, Request& req) {
  parse_number(
      in.object(), "temperature", in.at(), "a number >= 0", [](double d) { return d >= 0; },
      req.sampling.temperature);
}

void parse_top_p(const FieldInput& in, Request& req) {
  parse_number(
      in.object(), "top_p", in.at(), "a number in (0, 1]", [](double d) { return d > 0 && d <= 1; },
      req.sampling.top_p);
}

void parse_min_p(const FieldInput& in, Request& req) {
  parse_number(
      in.object(), "min_p", in.at(), "a number in [0, 1]",
      [](double d) { return d >= 0 && d <= 1; }, req.sampling.min_p);
}

void parse_ignore_eos(const FieldInput& in, Request& req) {
  req.ignore_eos = parse_bool(in.object(), "ignore_eos", in.at(), req.ignore_eos);
}

void parse_presence_penalty(const FieldInput& in, Request& req) {
  parse_number(
      in.object(), "presence_penalty", in.at(), "a number in [-2, 2]",
      [](double d) { return d >= -2 && d <= 2; }, req.logit_rules.presence_penalty);
}

void parse_frequency_penalty(const FieldInput& in, Request& req) {
  parse_number(
      in.object(), "frequency_penalty", in.at(), "a number in [-2, 2]",
      [](double d) { return d >= -2 && d <= 2; }, req.logit_rules.frequency_penalty);
}

void parse_repetition_penalty(const FieldInput& in, Request& req) {
  parse_number(
      in.object(), "repetition_penalty", in.at(), "a number > 0", [](double d) { return d > 0; },
      req.logit_rules.repetition_penalty);
}

void parse_logit_bias(const FieldInput& in, Request& req) {
  req.logit_rules.logit_bias = logit_bias(in.object(), in.at());
}

void parse_min_tokens(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  const json* v = find_field(in.object(), "min_tokens");
  if (!v) return;
  int64_t n = 0;
  if (!integer_in_range(*v, 0, std::numeric_limits<int>::max(), &n))
    reject(at, "field '", at.name("min_tokens"), "' must be an integer >= 0, got ",
           describe_json(*v));
  if (n > req.max_tokens)
    reject(at, "field '", at.name("min_tokens"), "' is ", n, ", more than max_tokens ",
           req.max_tokens);
  req.logit_rules.min_tokens = static_cast<int>(n);
}

void parse_stop_token_ids(const FieldInput& in, Request& req) {
  req.stop_token_ids = stop_token_ids(in.object(), in.at());
}

void parse_include_stop_str_in_output(const FieldInput& in, Request& req) {
  req.include_stop_str_in_output = parse_bool(in.object(), "include_stop_str_in_output", in.at(),
                                              req.include_stop_str_in_output);
}

void parse_skip_special_tokens(const FieldInput& in, Request& req) {
  req.skip_special_tokens =
      parse_bool(in.object(), "skip_special_tokens", in.at(), req.skip_special_tokens);
}

void parse_return_tokens_as_token_ids(const FieldInput& in, Request& req) {
  req.return_tokens_as_token_ids = parse_bool(in.object(), "return_tokens_as_token_ids", in.at(),
                                              req.return_tokens_as_token_ids);
}

void parse_spaces_between_special_tokens(const FieldInput& in, Request&) {
  // Read for its type only: as vLLM's fast (tokenizer.json) detokenizer, which most LLaMA-family
  // models get, special tokens' texts are joined as they are either way.
  parse_bool(in.object(), "spaces_between_special_tokens", in.at(), true);
}

void parse_echo(const FieldInput& in, Request& req) {
  req.echo = parse_bool(in.object(), "echo", in.at(), req.echo);
}

void parse_prompt_logprobs(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  if (const json* v = find_field(in.object(), "prompt_logprobs")) {
    int64_t k = 0;
    if (!integer_in_range(*v, 0, kMaxLogprobs, &k))
      reject(at, "field '", at.name("prompt_logprobs"), "' must be an integer in [0, ",
             kMaxLogprobs, "], got ", describe_json(*v));
    req.prompt_logprobs = static_cast<int>(k);
  }
}

void parse_n(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  if (const json* v = find_field(in.object(), "n")) {
    int64_t n = 0;
    if (!integer_in_range(*v, 1, kMaxSamples, &n))
      reject(at, "field '", at.name("n"), "' must be an integer from 1 to ", kMaxSamples, ", got ",
             describe_json(*v));
    req.n = static_cast<int>(n);
  }
}

void parse_truncate_prompt_tokens(const FieldInput& in, Request& req) {
  const FieldSite& at = in.at();
  const json* v = find_field(in.object(), "truncate_prompt_tokens");
  if (!v) return;
  int64_t k = 0;
  if (!integer_in_range(*v, -1, std::numeric_limits<int>::max(), &k) || k == 0)
    reject(at, "field '", at.name("truncate_prompt_tokens"),
           "' must be an integer >= 1 (keep the prompt's last k tokens) or -1 (its last "
           "--max-model-len tokens), got ",
           describe_json(*v));
  req.truncate_prompt_tokens = static_cast<int>(k);
}

}  // namespace tpllama::request_fields
