// Prompt-file parsing: plain-text and JSONL request lines, per-field validation with messages that
// name the line, and the per-request seed derivation.
#include "io/prompt_reader.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"

namespace tpllama {
namespace {

using nlohmann::json;

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;
constexpr const char* kKnownFields[] = {"id",    "prompt", "max_tokens", "temperature", "top_k",
                                        "top_p", "min_p",  "seed",       "stop"};

// Thrown while validating one line; caught in parse_jsonl and turned into Request::error.
struct BadLine {
  std::string message;
};

template <typename... Args>
[[noreturn]] void reject(size_t line, Args&&... args) {
  throw BadLine{detail::concat("line ", line, ": ", std::forward<Args>(args)...)};
}

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + kGoldenGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t derive_seed(uint64_t base, size_t line) {
  return splitmix64(base ^ (static_cast<uint64_t>(line) * kGoldenGamma));
}

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](unsigned char c) { return std::isspace(c) != 0; });
}

// Optional fields: absent and null both mean "use the default".
const json* find_field(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

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

std::string parser_message(const json::exception& e) {
  // Drop the "[json.exception.parse_error.101] " tag; and the parser only ever sees one line, so
  // its "line 1, " is noise next to our own line number.
  std::string msg = e.what();
  if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
  const std::string noise = "parse error at line 1, ";
  if (msg.rfind(noise, 0) == 0) msg = "parse error at " + msg.substr(noise.size());
  return msg.size() > 2 * kMaxShownChars ? msg.substr(0, 2 * kMaxShownChars) + "..." : msg;
}

json parse_id(const json& object, size_t line) {
  const json* v = find_field(object, "id");
  if (!v) return json(line);
  if (!v->is_string() && !v->is_number_integer())
    reject(line, "field 'id' must be a string or an integer, got ", describe_json(*v));
  return *v;
}

std::string parse_prompt(const json& object, size_t line) {
  auto it = object.find("prompt");
  if (it == object.end()) reject(line, "missing required field 'prompt'");
  if (!it->is_string()) reject(line, "field 'prompt' must be a string, got ", describe_json(*it));
  return it->get<std::string>();
}

void parse_max_tokens(const json& object, size_t line, Request& req) {
  const json* v = find_field(object, "max_tokens");
  if (!v) return;
  if (!v->is_number_integer() ||
      v->get<double>() < 1)  // parsed 0 is unsigned, so compare as double
    reject(line, "field 'max_tokens' must be an integer >= 1, got ", describe_json(*v));
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  int64_t n = 0;
  if (!integer_in_range(*v, 1, kMax, &n))
    reject(line, "field 'max_tokens' must be at most ", kMax, ", got ", describe_json(*v));
  req.max_tokens = static_cast<int>(n);
}

// A number satisfying ok(); expected names the accepted range in the message.
template <typename Pred>
void parse_number(const json& object, const char* key, size_t line, const char* expected, Pred ok,
                  double& out) {
  const json* v = find_field(object, key);
  if (!v) return;
  double d = v->is_number() ? v->get<double>() : 0.0;
  if (!v->is_number() || !std::isfinite(d) || !ok(d))
    reject(line, "field '", key, "' must be ", expected, ", got ", describe_json(*v));
  out = d;
}

void parse_top_k(const json& object, size_t line, SamplingParams& s) {
  const json* v = find_field(object, "top_k");
  if (!v) return;
  if (!v->is_number_integer()) reject(line, "field 'top_k' must be an integer, got ", describe_json(*v));
  // Beyond int range only "off" (<= 0) or "keep everything" make sense, so clamp rather than fail.
  constexpr int kMax = std::numeric_limits<int>::max();
  if (v->is_number_unsigned()) {
    s.top_k = static_cast<int>(std::min<uint64_t>(v->get<uint64_t>(), kMax));
  } else {
    int64_t k = v->get<int64_t>();
    s.top_k = k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(k, kMax));
  }
}

void parse_seed(const json& object, size_t line, SamplingParams& s) {
  const json* v = find_field(object, "seed");
  if (!v) return;
  if (v->is_number_unsigned()) {
    s.seed = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    s.seed = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    reject(line, "field 'seed' must be an integer between 0 and 2^64-1, got ", describe_json(*v));
  }
}

std::vector<std::string> parse_stop(const json& object, size_t line) {
  const json* v = find_field(object, "stop");
  if (!v) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& s : *v) {
      if (!s.is_string())
        reject(line, "field 'stop' must be a string or a list of strings, got ", describe_json(*v));
      stop.push_back(s.get<std::string>());
    }
  } else {
    reject(line, "field 'stop' must be a string or a list of strings, got ", describe_json(*v));
  }
  // An empty stop string would match before the first token and end every request at once.
  std::erase(stop, std::string());
  return stop;
}

void parse_fields(const json& object, size_t line, Request& req) {
  req.id = parse_id(object, line);
  req.prompt = parse_prompt(object, line);
  parse_max_tokens(object, line, req);
  SamplingParams& s = req.sampling;
  parse_number(
      object, "temperature", line, "a number >= 0", [](double d) { return d >= 0; }, s.temperature);
  parse_top_k(object, line, s);
  parse_number(
      object, "top_p", line, "a number in (0, 1]", [](double d) { return d > 0 && d <= 1; },
      s.top_p);
  parse_number(
      object, "min_p", line, "a number in [0, 1]", [](double d) { return d >= 0 && d <= 1; },
      s.min_p);
  parse_seed(object, line, s);
  req.stop = parse_stop(object, line);
}

}  // namespace

InputFormat detect_input_format(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".jsonl" || ext == ".json" || ext == ".ndjson") return InputFormat::kJsonl;
  return InputFormat::kText;
}

PromptReader::PromptReader(const std::string& path, RequestDefaults defaults)
    : in_(nullptr),
      format_(detect_input_format(path)),
      defaults_(std::move(defaults)),
      name_(path) {
  // A directory opens fine as an ifstream and then reads as empty; say what is wrong instead.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("cannot open prompt file ", path, ": ", std::strerror(EISDIR));
  errno = 0;
  auto file = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*file)
    fail("cannot open prompt file ", path, ": ", errno ? std::strerror(errno) : "unknown error");
  owned_ = std::move(file);
  in_ = owned_.get();
}

PromptReader::PromptReader(std::istream& in, InputFormat format, RequestDefaults defaults,
                           std::string name)
    : in_(&in), format_(format), defaults_(std::move(defaults)), name_(std::move(name)) {}

std::optional<Request> PromptReader::next() {
  std::string line;
  while (std::getline(*in_, line)) {
    ++lines_read_;
    // Editors on Windows add a byte-order mark; it is not part of the first prompt.
    if (lines_read_ == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    if (format_ == InputFormat::kText) return parse_text(std::move(line));
    return parse_jsonl(line);
  }
  if (in_->bad()) fail("error reading prompt file ", name_, " after line ", lines_read_);
  return std::nullopt;
}

Request PromptReader::start_request() const {
  Request req;
  req.line = lines_read_;
  req.id = json(lines_read_);
  req.max_tokens = defaults_.max_tokens;
  req.sampling = defaults_.sampling;
  req.sampling.seed = derive_seed(defaults_.seed, lines_read_);
  return req;
}

Request PromptReader::parse_text(std::string line) const {
  Request req = start_request();
  req.prompt = std::move(line);
  return req;
}

Request PromptReader::parse_jsonl(const std::string& line) {
  Request req = start_request();
  json object;
  try {
    object = json::parse(line);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    req.error = detail::concat("line ", req.line, ": not valid JSON: ", parser_message(e));
    return req;
  }
  if (!object.is_object()) {
    req.error =
        detail::concat("line ", req.line, ": expected a JSON object, got ", object.type_name());
    return req;
  }
  warn_unknown_fields(object);
  try {
    parse_fields(object, req.line, req);
  } catch (const BadLine& bad) {
    req.error = bad.message;
  }
  return req;
}

void PromptReader::warn_unknown_fields(const json& object) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (std::find_if(std::begin(kKnownFields), std::end(kKnownFields),
                     [&](const char* k) { return key == k; }) != std::end(kKnownFields))
      continue;
    if (!warned_fields_.insert(key).second) continue;
    log::warn(detail::concat(name_, " line ", lines_read_, ": ignoring unknown field ",
                             describe_json(json(key)), " (reported once per field name)"));
  }
}

}  // namespace tpllama
