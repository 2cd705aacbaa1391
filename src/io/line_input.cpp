// Line splitting over StreamFile, with the limit and the bounded waits.
#include "io/line_input.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tpllama {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

}  // namespace

LineInput::LineInput(const std::string& path, const std::string& what, size_t max_line_bytes)
    : file_(std::make_unique<StreamFile>(path, what)), max_line_bytes_(max_line_bytes) {}

LineInput::LineInput(std::string text, size_t max_line_bytes)
    : buffer_(std::move(text)), end_(true), max_line_bytes_(max_line_bytes) {}

LineInput::~LineInput() = default;
LineInput::LineInput(LineInput&&) noexcept = default;
LineInput& LineInput::operator=(LineInput&&) noexcept = default;

bool LineInput::take(std::string* line, Status* status) {
  if (skipping_) {
    const size_t nl = buffer_.find('\n', start_);
    if (nl == std::string::npos) {  // still inside the long line: drop what came
      buffer_.clear();
      start_ = scanned_ = 0;
      if (!end_) return false;
      skipping_ = false;
      *status = Status::kEnd;
      return true;
    }
    start_ = scanned_ = nl + 1;
    skipping_ = false;
  }
  const size_t nl = buffer_.find('\n', std::max(start_, scanned_));
  if (nl != std::string::npos) {
    const size_t length = nl - start_;
    if (length > max_line_bytes_) {  // it came whole in one read, yet is over the limit
      start_ = scanned_ = nl + 1;
      *status = Status::kTooLong;
      return true;
    }
    line->assign(buffer_, start_, length);
    start_ = scanned_ = nl + 1;
    *status = Status::kLine;
    return true;
  }
  scanned_ = buffer_.size();
  const size_t partial = buffer_.size() - start_;
  if (partial > max_line_bytes_) {
    buffer_.clear();
    start_ = scanned_ = 0;
    skipping_ = !end_;
    *status = Status::kTooLong;
    return true;
  }
  if (!end_) return false;
  if (partial == 0) {
    *status = Status::kEnd;
    return true;
  }
  line->assign(buffer_, start_, partial);  // the last line, with no '\n'
  start_ = scanned_ = buffer_.size();
  *status = Status::kLine;
  return true;
}

LineInput::Status LineInput::next(std::string* line, int wait_ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    Status status;
    if (take(line, &status)) return status;
    // Keep the unread tail only: what was handed out goes before more is read.
    if (start_ > 0) {
      buffer_.erase(0, start_);
      scanned_ -= start_;
      start_ = 0;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const StreamFile::Got got =
        file_->read_some(buffer_, kChunkBytes, static_cast<int>(std::max<long long>(0, left)));
    if (got == StreamFile::Got::kEnd) {
      end_ = true;
      continue;
    }
    // Out of time: what came may still hold a line; an endless one (/dev/zero) returns here too.
    if (left <= 0) return take(line, &status) ? status : Status::kPending;
  }
}

}  // namespace tpllama
