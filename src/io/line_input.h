// Lines of an input as they come: a regular file, or a pipe or FIFO that another program writes
// while the run goes on. A line is handed out as soon as its '\n' arrives (no waiting for the next
// one), waits are bounded so that callers can look at the stop signal, and a line is never held
// past a limit: an endless one (/dev/zero) costs the limit in memory, not all of it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/file_read.h"

namespace tpllama {

class LineInput {
 public:
  // Far above any context's worth of text (a 128k-token prompt is about 0.5 MiB, JSON-escaped a
  // few MiB), yet a bound on what one line can cost rank 0.
  static constexpr size_t kMaxLineBytes = size_t{64} << 20;

  // Opens path (a directory or a missing file is refused, naming `what` and the path).
  LineInput(const std::string& path, const std::string& what,
            size_t max_line_bytes = kMaxLineBytes);
  // Lines of text held in memory (a caller's stream, already read).
  explicit LineInput(std::string text, size_t max_line_bytes = kMaxLineBytes);
  ~LineInput();
  LineInput(LineInput&&) noexcept;
  LineInput& operator=(LineInput&&) noexcept;

  enum class Status {
    kLine,     // *line is the next line, without its '\n'
    kTooLong,  // the next line is longer than the limit: not kept; the rest of it is skipped as it
               // comes
    kPending,  // no whole line came within the wait (a stream that went quiet)
    kEnd,      // the end of the input
  };
  // Waits at most wait_ms for a whole line (0: takes only what is there).
  Status next(std::string* line, int wait_ms);
  size_t max_line_bytes() const { return max_line_bytes_; }

 private:
  // The next buffered line (or the end), if the buffer holds one.
  bool take(std::string* line, Status* status);

  std::unique_ptr<StreamFile> file_;  // null for text in memory
  std::string buffer_;
  size_t start_ = 0;       // of the unread part of buffer_
  size_t scanned_ = 0;     // buffer_ before this holds no '\n' after start_
  bool end_ = false;       // the file has ended: buffer_ is all there is
  bool skipping_ = false;  // within a too-long line: dropping bytes up to its '\n'
  size_t max_line_bytes_;
};

}  // namespace tpllama
