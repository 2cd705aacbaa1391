// Appends one JSON object per finished request to the output file. Each record goes out in a
// single write() on an O_APPEND descriptor, so a killed run leaves at most a torn last line.
#pragma once

#include <cstddef>
#include <string>

#include "io/request.h"

namespace tpllama {

class ResultWriter {
 public:
  // Creates or truncates path; the parent directory must exist. Throws Error naming the path.
  explicit ResultWriter(const std::string& path);
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;
  ResultWriter(ResultWriter&& other) noexcept;
  ResultWriter& operator=(ResultWriter&& other) noexcept;

  void write(const Result& r);  // throws Error on I/O failure (disk full, ...)
  void sync();                  // fsync; a no-op for pipes and devices that cannot sync
  size_t records_written() const { return records_written_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  size_t records_written_ = 0;
};

// {"id","text","prompt_tokens","completion_tokens","finish_reason"} in that order, plus "error"
// only when finish_reason is "error"; invalid UTF-8 becomes U+FFFD. Ends with '\n'.
std::string result_to_json_line(const Result& r);

}  // namespace tpllama
