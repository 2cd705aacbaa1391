// OpenAI batch request lines (custom_id, method, url, body) validated into Requests, and Results
// shaped as batch output lines: a text_completion or chat.completion body on success, a 400 error
// body otherwise.
#include "io/openai_batch.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>

#include "core/hash.h"
#include "core/json_text.h"
#include "core/utf8.h"
#include "io/request_fields.h"

namespace tpllama {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using request_fields::BadLine;
using request_fields::FieldSite;
using request_fields::find_field;
using request_fields::reject;

constexpr const char* kCompletionsUrl = "/v1/completions";
constexpr const char* kChatUrl = "/v1/chat/completions";
constexpr const char* kTopFields[] = {"custom_id", "method", "url", "body"};
// A batch line is its four fields: anything else beside them is no part of the convention.
void refuse_unknown_envelope_fields(const json& object, const FieldSite& at) {
  for (auto it = object.begin(); it != object.end(); ++it)
    if (std::find(std::begin(kTopFields), std::end(kTopFields), it.key()) == std::end(kTopFields))
      reject(at, "unknown field '", it.key(),
             "' in a batch line (it has custom_id, method, url and body; the request's ",
             "fields go in body)");
}

// The envelope's checks; true for a chat request (url /v1/chat/completions).
bool check_envelope(const json& object, const FieldSite& at) {
  if (const json* m = find_field(object, "method"); m && *m != json("POST"))
    reject(at, "field 'method' must be \"POST\", got ", describe_json(*m));
  auto url = object.find("url");
  if (url == object.end() || url->is_null())
    reject(at, "missing required field 'url' (", kCompletionsUrl, " or ", kChatUrl, ")");
  if (*url != json(kCompletionsUrl) && *url != json(kChatUrl))
    reject(at, "field 'url' is ", describe_json(*url), ": only ", kCompletionsUrl, " and ",
           kChatUrl, " are supported");
  auto body = object.find("body");
  if (body == object.end()) reject(at, "missing required field 'body'");
  if (!body->is_object()) reject(at, "field 'body' must be an object, got ", describe_json(*body));
  return *url == json(kChatUrl);
}

ordered_json usage_json(const Result& r) {
  ordered_json u;
  u["prompt_tokens"] = r.prompt_tokens;
  u["completion_tokens"] = r.completion_tokens;
  u["total_tokens"] = r.prompt_tokens + r.completion_tokens;
  return u;
}

// A token's bytes from its shown text: "bytes:\xNN..." spells them out, other text is its own
// bytes.
ordered_json token_bytes_json(const std::string& shown) {
  ordered_json bytes = ordered_json::array();
  constexpr std::string_view kPrefix = "bytes:";
  if (shown.rfind(kPrefix, 0) == 0 && (shown.size() - kPrefix.size()) % 4 == 0) {
    for (size_t i = kPrefix.size(); i + 4 <= shown.size(); i += 4)
      bytes.push_back(std::stoi(shown.substr(i + 2, 2), nullptr, 16));
    return bytes;
  }
  for (unsigned char c : shown) bytes.push_back(static_cast<int>(c));
  return bytes;
}

ordered_json chat_token_json(const std::string& token, double logprob) {
  ordered_json t;
  t["token"] = token;
  t["logprob"] = logprob;
  t["bytes"] = token_bytes_json(token);
  return t;
}

// The chat layout: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
// "bytes"}]}]}.
ordered_json chat_logprobs_json(const std::vector<TokenLogprob>& logprobs) {
  ordered_json content = ordered_json::array();
  for (const TokenLogprob& t : logprobs) {
    ordered_json entry = chat_token_json(t.token, t.logprob);
    ordered_json top = ordered_json::array();
    for (const auto& [text, lp] : t.top) top.push_back(chat_token_json(text, lp));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

// One choice of a response body: a chat message or a completion's text.
ordered_json choice_json(bool chat, int index, const std::string& text,
                         const std::string& finish_reason, const json& stop_reason,
                         const std::optional<std::vector<TokenLogprob>>& logprobs,
                         const std::optional<std::vector<PositionLogprobs>>& prompt_logprobs) {
  ordered_json choice;
  choice["index"] = index;
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    choice["logprobs"] = logprobs ? chat_logprobs_json(*logprobs) : ordered_json(nullptr);
    choice["finish_reason"] = finish_reason;
    choice["stop_reason"] = stop_reason;  // vLLM's: the stop string or id, else null
  } else {
    choice["text"] = text;
    choice["finish_reason"] = finish_reason;
    choice["stop_reason"] = stop_reason;
    choice["logprobs"] = logprobs ? logprobs_to_json(*logprobs) : ordered_json(nullptr);
    // vLLM's, on each choice of a completion (a chat's are the body's).
    if (prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_to_json(*prompt_logprobs);
  }
  return choice;
}

ordered_json completion_body(const Result& r, const std::string& hex, const RecordOrigin& origin,
                             int64_t created) {
  ordered_json choices = ordered_json::array();
  if (r.choices.empty())
    choices.push_back(choice_json(r.chat, 0, r.text, r.finish_reason, r.stop_reason, r.logprobs,
                                  r.prompt_logprobs));
  for (const Choice& c : r.choices)
    choices.push_back(choice_json(r.chat, c.index, c.text, c.finish_reason, c.stop_reason,
                                  c.logprobs, c.prompt_logprobs));
  const auto& prompt_logprobs =
      r.choices.empty() ? r.prompt_logprobs : r.choices[0].prompt_logprobs;
  ordered_json body;
  body["id"] = (r.chat ? "chatcmpl-" : "cmpl-") + hex;
  body["object"] = r.chat ? "chat.completion" : "text_completion";
  body["created"] = created;
  body["model"] = origin.model;
  body["system_fingerprint"] = origin.system_fingerprint.empty()
                                   ? ordered_json(nullptr)
                                   : ordered_json(origin.system_fingerprint);
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(r);
  if (r.chat && prompt_logprobs)
    body["prompt_logprobs"] = prompt_logprobs_to_json(*prompt_logprobs);
  return body;
}

}  // namespace

void parse_openai_batch_request(const json& object, const std::string& line, Request& req) {
  const FieldSite top{req.line, ""};
  bool chat = false;
  try {  // the envelope: a line that fails here is no request
    auto id = object.find("custom_id");
    if (id == object.end()) reject(top, "missing required field 'custom_id'");
    if (!id->is_string())
      reject(top, "field 'custom_id' must be a string, got ", describe_json(*id));
    req.id = *id;
    refuse_unknown_envelope_fields(object, top);
    chat = check_envelope(object, top);
  } catch (const BadLine& bad) {
    req.error = bad.message;
    req.line_failed = true;
    return;
  }
  try {  // the body: a request the endpoint refuses
    const request_fields::Taker taker =
        chat ? request_fields::kBatchChat : request_fields::kBatchCompletion;
    request_fields::read_request(
        request_fields::FieldInput(object.at("body"), line, true, {req.line, "body."}, taker), req);
  } catch (const BadLine& bad) {
    req.error = bad.message;
  }
}

std::string openai_request_hex(const Result& r) {
  Fnv1a h;
  // A record of a line that is no request (its custom_id unread, or another line's) is told apart
  // by its line: every output line has its own id.
  h.add((r.id.is_null() || r.line_failed) && r.line > 0 ? error_line_key(r.line) : id_key(r.id));
  return h.hex();
}

ordered_json logprobs_to_json(const std::vector<TokenLogprob>& logprobs) {
  ordered_json tokens = ordered_json::array(), values = ordered_json::array(),
               tops = ordered_json::array(), offsets = ordered_json::array();
  size_t offset = 0;
  for (const TokenLogprob& t : logprobs) {
    offsets.push_back(offset);
    offset += utf8::count(t.token);  // a token's shown text is valid UTF-8
    tokens.push_back(t.token);
    if (t.null) {  // an echoed prompt's first token: nothing before it to predict it
      values.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    values.push_back(t.logprob);
    // Two token ids can decode to the same text; keep the first (most likely) of them.
    ordered_json top = ordered_json::object();
    for (const auto& [text, lp] : t.top)
      if (!top.contains(text)) top[text] = lp;
    tops.push_back(std::move(top));
  }
  ordered_json j;
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(values);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

ordered_json prompt_logprobs_to_json(const std::vector<PositionLogprobs>& positions) {
  ordered_json list = ordered_json::array({nullptr});
  for (const PositionLogprobs& at : positions) {
    ordered_json tokens = ordered_json::object();
    for (const RankedLogprob& t : at) {
      const std::string key = std::to_string(t.token);
      if (tokens.contains(key)) continue;  // the prompt's token among the most likely
      tokens[key] = {{"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", t.text}};
    }
    list.push_back(std::move(tokens));
  }
  return list;
}

ordered_json openai_batch_record(const Result& r, const RecordOrigin& origin, int64_t created) {
  const std::string hex = openai_request_hex(r);
  ordered_json response(nullptr);
  ordered_json error(nullptr);
  if (r.finish_reason == "error" && r.line_failed) {
    error = {{"code", "invalid_request"},
             {"message", r.error}};  // the line never reached an endpoint
  } else if (r.finish_reason == "error") {
    response["status_code"] = 400;
    response["request_id"] = hex;
    response["body"]["error"] = {{"message", r.error},
                                 {"type", "invalid_request_error"},
                                 {"param", nullptr},
                                 {"code", nullptr}};
  } else {
    response["status_code"] = 200;
    response["request_id"] = hex;
    response["body"] = completion_body(r, hex, origin, created);
  }
  ordered_json j;
  j["id"] = "batch_req_" + hex;
  j["custom_id"] = ordered_json(r.id);
  j["response"] = std::move(response);
  j["error"] = std::move(error);
  return j;
}

}  // namespace tpllama
