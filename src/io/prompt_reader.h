// Streams requests from a prompt file one line at a time: plain text (one prompt per line), JSONL
// (one request object per line) or OpenAI batch lines. A bad line becomes an error record; it
// never ends the stream.
#pragma once

#include <cstddef>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/line_input.h"
#include "io/request.h"

namespace tpllama {

enum class InputFormat { kText, kJsonl, kOpenAiBatch };

// "text" | "jsonl" | "openai"; "auto" gives nullopt (detect). Throws Error for any other name.
std::optional<InputFormat> parse_input_format(const std::string& name);

// For a regular file whose first JSON object line (among its first 16 non-blank lines, within the
// first few MB; malformed object or array lines before it are skipped, any other line ends the
// search) has both "custom_id" and "body": kOpenAiBatch. Otherwise, and always for pipes and
// devices (which cannot be read twice), by extension: ".jsonl", ".json", ".ndjson" (any case) are
// JSONL, everything else is plain text.
InputFormat detect_input_format(const std::string& path);

// Non-blank lines of a regular file (the progress total); nullopt for pipes, devices, or a file
// that cannot be read. Scans in chunks, never holding a whole line.
std::optional<size_t> count_prompt_lines(const std::string& path);

// Requests without their own seed get one derived from defaults.seed and the line number, so each
// request has a distinct stream that does not depend on batching or on which other lines exist.
// Where requests come from: a prompt file, or requests made by a command (perplexity windows).
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  // The next request (possibly with error set), or nullopt: at the end (ended() is then true), or
  // when a stream has no whole request yet. wait: look for one for up to a quarter second (callers
  // that loop look at the stop signal between calls); else take only what has already come.
  virtual std::optional<Request> next(bool wait) = 0;
  virtual bool ended() const = 0;
};

class PromptReader : public RequestSource {
 public:
  // Format from detect_input_format(path). Throws Error "cannot open prompt file <path>: <reason>".
  PromptReader(const std::string& path, RequestDefaults defaults);
  // As above with the format given; nullopt means detect_input_format(path).
  PromptReader(const std::string& path, RequestDefaults defaults,
               std::optional<InputFormat> format);
  // Reads all of in now (tests, small inputs); name appears in warnings.
  PromptReader(std::istream& in, InputFormat format, RequestDefaults defaults, std::string name);

  // The next non-blank line as a request (possibly with error set; a line over
  // LineInput::kMaxLineBytes is one, without being read); nullopt at the end of the input or while
  // a stream has no whole line (RequestSource::next). Throws Error only if reading itself fails.
  std::optional<Request> next(bool wait) override;
  bool ended() const override { return ended_; }
  // Lines consumed so far, blank ones included.
  size_t lines_read() const { return lines_read_; }
  InputFormat format() const { return format_; }
  // The name of the model that answers (OpenAI records' "model"): a JSONL line's "model" or a batch
  // line's body.model that names another is said once (log::info), as the requests go to this
  // model all the same.
  void set_answering_model(std::string name) { answering_model_ = std::move(name); }
  // With keep: last_line() is the line the last request came from (cleaned of a byte-order mark
  // and '\r'; empty for a line too long to read), for rank 0 to hand it to another replica.
  void keep_lines(bool keep) { keep_lines_ = keep; }
  const std::string& last_line() const { return last_line_; }
  // A line another reader read (last_line()), as line `line_number` of its input: the request it
  // gave there.
  Request parse_line(std::string line, size_t line_number);

 private:
  Request parse(std::string line);
  Request start_request() const;
  // Its constraint compiled with --json-max-digits.
  Request with_digits(Request req) const;
  Request parse_text(std::string line) const;
  Request too_long() const;
  Request parse_jsonl(const std::string& line);
  Request parse_openai(const std::string& line);
  // `fields`: the object that holds the request's "model" (a JSONL line, a batch line's body).
  void note_requested_model(const nlohmann::json& fields);

  LineInput lines_;
  bool ended_ = false;
  InputFormat format_;
  RequestDefaults defaults_;
  std::string name_;
  size_t lines_read_ = 0;
  std::string answering_model_;
  bool said_model_ = false;
  bool keep_lines_ = false;
  std::string last_line_;
};

}  // namespace tpllama
