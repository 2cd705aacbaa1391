// Prompt-file reading: format detection, plain-text, JSONL and OpenAI batch lines (fields are
// validated in request_fields), the per-request seed derivation and the progress line count.
#include "io/prompt_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/random.h"
#include "core/stop_signal.h"
#include "io/openai_batch.h"
#include "io/request_fields.h"

namespace tpllama {
namespace {

using nlohmann::json;
using request_fields::BadLine;
using request_fields::FieldInput;
using request_fields::FieldSite;
using request_fields::reject;
using request_fields::Taker;

constexpr size_t kSniffBytes = size_t{4} << 20;
constexpr const char* kByteOrderMark = "\xEF\xBB\xBF";

uint64_t derive_seed(uint64_t base, size_t line) {
  return splitmix64(base ^ (static_cast<uint64_t>(line) * kSplitmix64Gamma));
}

bool is_space(unsigned char c) {
  return std::isspace(c) != 0;
}

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), is_space);
}

InputFormat format_from_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".jsonl" || ext == ".json" || ext == ".ndjson") return InputFormat::kJsonl;
  return InputFormat::kText;
}

constexpr int kSniffLines = 16;  // non-blank lines detection looks at

// The first of the first kSniffLines non-blank lines of a regular file that is a JSON object,
// looking no further than kSniffBytes: a malformed object or array line before it is skipped (it
// does not hide the format of the rest), but any other line ends the search (a text file's later
// line that quotes a batch request does not make it a batch file).
std::optional<json> first_json_object_line(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::streambuf* buf = in.rdbuf();
  std::string line;
  int nonblank = 0;
  for (size_t n = 0; n < kSniffBytes && nonblank < kSniffLines; ++n) {
    int c = buf->sbumpc();
    if (c != std::char_traits<char>::eof() && c != '\n') {
      line.push_back(static_cast<char>(c));
      continue;
    }
    if (line.rfind(kByteOrderMark, 0) == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!is_blank(line)) {
      ++nonblank;
      const char first = *std::find_if_not(line.begin(), line.end(), is_space);
      if (first != '{' && first != '[') return std::nullopt;
      // A line nested too deep is skipped as a malformed one is (the reader refuses it later).
      json object = json_depth_error(line, kMaxLineJsonValues)
                        ? json()
                        : json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (object.is_object()) return object;
    }
    if (c == std::char_traits<char>::eof()) return std::nullopt;
    line.clear();
  }
  return std::nullopt;
}

// The kind of request a line makes, from the fields that set it: 'messages', 'context' and
// 'continuation', or 'prompt' (a line that mixes them is refused).
Taker request_kind(const json& object, const FieldSite& at) {
  if (object.contains("messages")) {
    if (object.contains("prompt") || object.contains("context") || object.contains("continuation"))
      reject(at, "a chat request has 'messages' only, not 'prompt', 'context' or 'continuation'");
    return request_fields::kJsonlChat;
  }
  if (object.contains("context") || object.contains("continuation")) {
    if (object.contains("prompt"))
      reject(at, "a request has either 'prompt' or 'context' and 'continuation', not both");
    return request_fields::kJsonlScoring;
  }
  return request_fields::kJsonlCompletion;
}

// `line` is the text of the line: a chat request's fields are read again from it with their keys in
// order.
void parse_fields(const json& object, const std::string& line, Request& req) {
  const FieldSite at{req.line, ""};
  read_fields(request_fields::FieldStage::kIdentity,
              FieldInput(object, line, false, at, request_fields::kJsonlCompletion), req);
  const Taker kind = request_kind(object, at);
  if (kind == request_fields::kJsonlScoring) {
    req.scoring = true;
    req.n = 1;               // a score is one number (--n samples completions and chats)
    req.constraint.reset();  // nor is it constrained by --response-format
  }
  request_fields::read_request(FieldInput(object, line, false, at, kind), req);
}

}  // namespace

std::optional<InputFormat> parse_input_format(const std::string& name) {
  if (name == "auto") return std::nullopt;
  if (name == "text") return InputFormat::kText;
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "openai") return InputFormat::kOpenAiBatch;
  fail("unknown input format '", name, "' (expected auto, text, jsonl or openai)");
}

InputFormat detect_input_format(const std::string& path) {
  if (std::optional<json> object = first_json_object_line(path))
    if (object->contains("custom_id") && object->contains("body")) return InputFormat::kOpenAiBatch;
  return format_from_extension(path);
}

std::optional<size_t> count_prompt_lines(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<char> chunk(size_t{1} << 20);
  size_t count = 0;
  bool has_text = false, first_chunk = true;
  for (;;) {
    if (stop_signal() != 0) {  // a huge file on a slow disk: the run stops before it starts anyway
      ::close(fd);
      return std::nullopt;
    }
    ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    const auto size = static_cast<size_t>(n);
    // A leading byte-order mark is not text (the reader strips it too).
    size_t i =
        first_chunk && size >= 3 && std::memcmp(chunk.data(), kByteOrderMark, 3) == 0 ? 3 : 0;
    first_chunk = false;
    for (; i < size; ++i) {
      const auto c = static_cast<unsigned char>(chunk[i]);
      if (c == '\n') {
        count += has_text ? 1 : 0;
        has_text = false;
      } else if (!is_space(c)) {
        has_text = true;
      }
    }
  }
  ::close(fd);
  return count + (has_text ? 1 : 0);
}

PromptReader::PromptReader(const std::string& path, RequestDefaults defaults)
    : PromptReader(path, std::move(defaults), std::nullopt) {}

PromptReader::PromptReader(const std::string& path, RequestDefaults defaults,
                           std::optional<InputFormat> format)
    : lines_(path, "prompt file"),
      format_(format.value_or(InputFormat::kText)),
      defaults_(std::move(defaults)),
      name_(path) {
  // Detect only once the path is known to open, so a missing file reports itself as such.
  if (!format) format_ = detect_input_format(path);
}

namespace {
std::string read_all(std::istream& in) {
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

PromptReader::PromptReader(std::istream& in, InputFormat format, RequestDefaults defaults,
                           std::string name)
    : lines_(read_all(in)),
      format_(format),
      defaults_(std::move(defaults)),
      name_(std::move(name)) {}

std::optional<Request> PromptReader::next(bool wait) {
  // A waiting engine sends its keep-alive between waits: a quarter second keeps it far inside half
  // of any --stall-timeout a user sets (the watch warns at half).
  constexpr int kWaitMs = 250;
  std::string line;
  for (;;) {
    switch (lines_.next(&line, wait ? kWaitMs : 0)) {
      case LineInput::Status::kPending:
        return std::nullopt;
      case LineInput::Status::kEnd:
        ended_ = true;
        return std::nullopt;
      case LineInput::Status::kTooLong:
        ++lines_read_;
        last_line_.clear();
        return too_long();
      case LineInput::Status::kLine:
        break;
    }
    ++lines_read_;
    // Editors on Windows add a byte-order mark; it is not part of the first prompt.
    if (lines_read_ == 1 && line.rfind(kByteOrderMark, 0) == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    if (keep_lines_) last_line_ = line;
    return parse(std::move(line));
  }
}

Request PromptReader::parse_line(std::string line, size_t line_number) {
  lines_read_ = line_number;
  return parse(std::move(line));
}

Request PromptReader::parse(std::string line) {
  if (format_ == InputFormat::kText) return parse_text(std::move(line));
  try {
    return with_digits(format_ == InputFormat::kOpenAiBatch ? parse_openai(line)
                                                            : parse_jsonl(line));
  } catch (const std::bad_alloc&) {  // the line's values outgrow memory: that line's error record
    Request req = start_request();
    req.error = detail::concat("line ", lines_read_, ": out of memory holding its ", line.size(),
                               " bytes of JSON as values: not read");
    return req;
  }
}

Request PromptReader::start_request() const {
  Request req;
  req.line = lines_read_;
  req.id = json(lines_read_);
  req.max_tokens = defaults_.max_tokens;
  req.sampling = defaults_.sampling;
  req.sampling.seed = derive_seed(defaults_.seed, lines_read_);
  req.n = defaults_.n;
  req.constraint = defaults_.constraint;
  return with_digits(std::move(req));
}

Request PromptReader::with_digits(Request req) const {
  if (req.constraint) req.constraint->max_digits = defaults_.json_max_digits;
  return req;
}

Request PromptReader::parse_text(std::string line) const {
  Request req = start_request();
  req.prompt = std::move(line);
  return req;
}

Request PromptReader::too_long() const {
  Request req = start_request();
  if (format_ != InputFormat::kText)
    req.id = json(nullptr);  // its id, if it gives one, is not read
  req.line_failed = true;
  req.error = detail::concat(
      "line ", lines_read_, " is longer than ", byte_limit_text(lines_.max_line_bytes()),
      ", the limit for one request: not read (no context holds that much text)");
  return req;
}

Request PromptReader::parse_jsonl(const std::string& line) {
  Request req = start_request();
  req.id =
      json(nullptr);  // an id comes from the line, or from its number once the line is an object
  json object;
  if (!request_fields::parse_object_line(line, object, req)) {
    req.line_failed = true;
    return req;
  }
  try {
    parse_fields(object, line, req);
  } catch (const BadLine& bad) {
    req.error = bad.message;
  }
  note_requested_model(object);
  return req;
}

Request PromptReader::parse_openai(const std::string& line) {
  Request req = start_request();
  req.id = json(nullptr);  // the custom_id, once read
  json object;
  if (!request_fields::parse_object_line(line, object, req)) {
    req.line_failed = true;
    return req;
  }
  parse_openai_batch_request(object, line, req);
  if (const auto body = object.find("body"); body != object.end()) note_requested_model(*body);
  return req;
}

void PromptReader::note_requested_model(const json& fields) {
  if (said_model_ || answering_model_.empty() || !fields.is_object()) return;
  const auto model = fields.find("model");
  if (model == fields.end() || !model->is_string() || *model == answering_model_) return;
  said_model_ = true;
  log::info(detail::concat(name_, " line ", lines_read_, " asks for model ", describe_json(*model),
                           ": ", answering_model_, " (--model) answers every request (said once)"));
}

}  // namespace tpllama
