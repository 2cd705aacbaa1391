// Appends one JSON object per finished request to the output file, as tpllama JSONL or OpenAI
// batch output lines. Each record goes out in a single write() on an O_APPEND descriptor, so a
// killed run leaves at most a torn last line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "io/openai_batch.h"
#include "io/request.h"

namespace tpllama {

enum class OutputFormat { kJsonl, kOpenAiBatch };

// Where results go: the output file, or a command's own accumulator (perplexity).
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  virtual void write(const Result& r) = 0;
  virtual void sync() {}
};

class ResultWriter : public ResultSink {
 public:
  // Creates path, or truncates it unless append (then earlier records stay, e.g. for a resumed
  // run). The parent directory must exist. Throws Error naming the path. origin fills the OpenAI
  // body's "model" and "system_fingerprint".
  explicit ResultWriter(const std::string& path, OutputFormat format = OutputFormat::kJsonl,
                        bool append = false, RecordOrigin origin = {});
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;
  ResultWriter(ResultWriter&& other) noexcept;
  ResultWriter& operator=(ResultWriter&& other) noexcept;

  void write(const Result& r) override;  // throws Error on I/O failure (disk full, ...)
  // A line of the caller's own format (perplexity's window records), appended as a record is: in
  // one write loop on the O_APPEND descriptor. `line` ends with '\n'.
  void write_line(const std::string& line);
  void sync() override;  // fsync; a no-op for pipes and devices that cannot sync
  size_t records_written() const { return records_written_; }
  const std::string& path() const { return path_; }
  OutputFormat format() const { return format_; }

 private:
  std::string path_;
  OutputFormat format_ = OutputFormat::kJsonl;
  RecordOrigin origin_;
  int fd_ = -1;
  size_t records_written_ = 0;
};

// STDOUT_FILENO or STDERR_FILENO when `path` names this process's stdout or stderr, however spelt
// (/dev/stdout, a link to it, the file the shell sent it to: the same inode), else -1.
int standard_stream_of(const std::string& path);

// Writes `text` as the whole of `path` (a file is locked, then truncated: a file another process
// holds locked is refused, not cut); this process's stdout or stderr is written through its
// descriptor, after what is already there. Throws Error naming `flag` and the path.
void write_text_file(const std::string& path, const std::string& text, const char* flag);
// The JSON, indented, as the whole of the file a flag names (as write_text_file).
void write_json_file(const std::string& path, const nlohmann::json& j, const char* flag);

// Whether `path` is a regular file whose lock (OutputHolds', or write_text_file's while it writes)
// another open of it holds: another tpllama process's running job writes it. A probe, taken and
// dropped at once; false for a missing file, this process's stdout or stderr, pipes and devices.
// Locks are per open file, so a lock this process holds itself counts too: probe before locking.
bool locked_by_another_writer(const std::string& path);

// kJsonl: {"id","text","prompt_tokens","completion_tokens","finish_reason"} in that order, plus
// "stop_reason" when not null, "error" only when finish_reason is "error" and "logprobs" only when
// r.logprobs is set; a request of n > 1 samples: {"id","choices","prompt_tokens",
// "completion_tokens"}, each choice {"index","text","completion_tokens","finish_reason"} with its
// own "stop_reason" and "logprobs" likewise.
// kOpenAiBatch: {"id": "batch_req_<hex>", "custom_id", "response", "error"} (see openai_batch.h).
// Invalid UTF-8 becomes U+FFFD. Ends with '\n'.
std::string result_to_json_line(const Result& r, OutputFormat format = OutputFormat::kJsonl,
                                const RecordOrigin& origin = {});

// Writes results in input order although they finish in any order. The caller numbers requests
// 0, 1, 2, ... as it reads them and submits each number exactly once; a result waits here until
// every earlier one is written. The caller bounds buffered() by pausing admission.
class OrderedResultWriter {
 public:
  explicit OrderedResultWriter(ResultSink& writer) : writer_(writer) {}

  // Throws Error (internal check) for an order already submitted.
  void submit(uint64_t order, Result r);
  size_t buffered() const { return pending_.size(); }
  uint64_t next_order() const { return next_order_; }  // the order the output is waiting for

 private:
  ResultSink& writer_;
  std::map<uint64_t, Result> pending_;
  uint64_t next_order_ = 0;
};

}  // namespace tpllama
