// Result records as JSON lines, written with raw POSIX I/O so each record is one write() call and
// a crash can tear only the record being written; and the reordering buffer in front of it.
#include "io/result_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/openai_batch.h"

namespace tpllama {

namespace {

// A request of n samples: each choice as {"index", "text", "completion_tokens", "finish_reason"},
// with "stop_reason" when not null and "logprobs" when asked for.
nlohmann::ordered_json choices_to_json(const std::vector<Choice>& choices) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Choice& c : choices) {
    nlohmann::ordered_json j;
    j["index"] = c.index;
    j["text"] = c.text;
    j["completion_tokens"] = c.completion_tokens;
    j["finish_reason"] = c.finish_reason;
    if (!c.stop_reason.is_null()) j["stop_reason"] = c.stop_reason;
    if (c.logprobs) j["logprobs"] = logprobs_to_json(*c.logprobs);
    if (c.prompt_logprobs) j["prompt_logprobs"] = prompt_logprobs_to_json(*c.prompt_logprobs);
    list.push_back(std::move(j));
  }
  return list;
}

}  // namespace

std::string result_to_json_line(const Result& r, OutputFormat format, const RecordOrigin& origin) {
  nlohmann::ordered_json j;
  if (format == OutputFormat::kOpenAiBatch) {
    j = openai_batch_record(r, origin, static_cast<int64_t>(std::time(nullptr)));
    if (r.finish_reason == "error" && r.line > 0) j["line"] = r.line;
  } else {
    // ordered_json keeps the documented key order, which makes the output easy to eyeball.
    j["id"] = nlohmann::ordered_json(r.id);
    if (r.score) {  // a scoring request: {"id", "logprob", "is_greedy", "n_tokens"[,
                    // "token_logprobs"]}
      j["logprob"] = r.score->logprob;
      j["is_greedy"] = r.score->is_greedy;
      j["n_tokens"] = r.score->n_tokens;
      if (!r.score->token_logprobs.empty()) j["token_logprobs"] = r.score->token_logprobs;
      return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + '\n';
    }
    if (!r.choices.empty()) {  // n samples: {"id", "choices", "prompt_tokens", "completion_tokens"}
      j["choices"] = choices_to_json(r.choices);
      j["prompt_tokens"] = r.prompt_tokens;
      j["completion_tokens"] = r.completion_tokens;
      return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + '\n';
    }
    j["text"] = r.text;
    j["prompt_tokens"] = r.prompt_tokens;
    j["completion_tokens"] = r.completion_tokens;
    j["finish_reason"] = r.finish_reason;
    if (!r.stop_reason.is_null()) j["stop_reason"] = r.stop_reason;
    if (r.finish_reason == "error") {
      j["error"] = r.error;
      if (r.line > 0) j["line"] = r.line;
    }
    if (r.logprobs) j["logprobs"] = logprobs_to_json(*r.logprobs);
    if (r.prompt_logprobs) j["prompt_logprobs"] = prompt_logprobs_to_json(*r.prompt_logprobs);
  }
  // Generated text can end mid-codepoint (or the model emits raw bytes); never lose the record.
  std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  line += '\n';
  return line;
}

int standard_stream_of(const std::string& path) {
  struct stat named {};
  if (::stat(path.c_str(), &named) != 0) return -1;
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat stream {};
    if (::fstat(fd, &stream) == 0 && stream.st_dev == named.st_dev && stream.st_ino == named.st_ino)
      return fd;
  }
  return -1;
}

namespace {

// The process's own streams are written through their descriptors: opened afresh, a file the
// shell sent stdout and stderr to would get a second offset, and log lines would overwrite records
// (or truncation would wipe them). A FIFO is opened without waiting: with no reader it fails now,
// naming the cause, instead of blocking the run where no stop signal reaches it.
// The descriptor, or -1 with `why` set.
int open_output(const std::string& path, bool append, std::string& why) {
  if (const int stream = standard_stream_of(path); stream >= 0) {
    const int fd = ::fcntl(stream, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) why = std::strerror(errno);
    return fd;
  }
  struct stat st {};
  const bool fifo = ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append || fifo ? 0 : O_TRUNC) |
                    (fifo ? O_NONBLOCK : 0);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    why = fifo && errno == ENXIO ? "no process is reading the FIFO: start its reader first"
                                 : std::strerror(errno);
    return -1;
  }
  if (fifo) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // writes wait for the reader
  return fd;
}

}  // namespace

void write_json_file(const std::string& path, const nlohmann::json& j, const char* flag) {
  write_text_file(path, j.dump(2) + "\n", flag);
}

void write_text_file(const std::string& path, const std::string& text, const char* flag) {
  std::string why;
  // Opened without truncation: a regular file is cut only once its lock is ours, so another job's
  // output survives a clash that began after the checks.
  const bool stream = standard_stream_of(path) >= 0;
  const int fd = open_output(path, /*append=*/true, why);
  if (fd < 0) fail("cannot write ", flag, " file ", path, ": ", why);
  struct stat st {};
  if (!stream && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK)
        fail(flag, " ", path, " is locked by another tpllama process (a running job writes it)");
      fail("cannot lock ", flag, " file ", path, ": ", std::strerror(err));
    }
    if (::ftruncate(fd, 0) != 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot write ", flag, " file ", path, ": ", std::strerror(err));
    }
  }
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("error while writing ", flag, " file ", path, ": ", std::strerror(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    fail("error while writing ", flag, " file ", path, ": ", std::strerror(errno));
}

ResultWriter::ResultWriter(const std::string& path, OutputFormat format, bool append,
                           RecordOrigin origin)
    : path_(path), format_(format), origin_(std::move(origin)) {
  std::string why;
  fd_ = open_output(path, append, why);
  if (fd_ < 0) fail("cannot open output file ", path, ": ", why);
}

ResultWriter::~ResultWriter() {
  if (fd_ >= 0) ::close(fd_);
}

ResultWriter::ResultWriter(ResultWriter&& other) noexcept
    : path_(std::move(other.path_)),
      format_(other.format_),
      origin_(std::move(other.origin_)),
      fd_(std::exchange(other.fd_, -1)),
      records_written_(other.records_written_) {}

ResultWriter& ResultWriter::operator=(ResultWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    format_ = other.format_;
    origin_ = std::move(other.origin_);
    fd_ = std::exchange(other.fd_, -1);
    records_written_ = other.records_written_;
  }
  return *this;
}

void ResultWriter::write(const Result& r) {
  write_line(result_to_json_line(r, format_, origin_));
}

void ResultWriter::write_line(const std::string& line) {
  TPLLAMA_CHECK(fd_ >= 0, "write on a moved-from ResultWriter");
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write to output file ", path_, ": ", std::strerror(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ++records_written_;
}

void ResultWriter::sync() {
  TPLLAMA_CHECK(fd_ >= 0, "sync on a moved-from ResultWriter");
  // Pipes and character devices (e.g. /dev/stdout) cannot be synced; that is not an error here.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    fail("cannot sync output file ", path_, ": ", std::strerror(errno));
}

void OrderedResultWriter::submit(uint64_t order, Result r) {
  TPLLAMA_CHECK(order >= next_order_ && !pending_.contains(order), "result order ", order,
                " submitted twice");
  if (order != next_order_) {
    pending_.emplace(order, std::move(r));
    return;
  }
  writer_.write(r);
  ++next_order_;
  for (auto it = pending_.begin(); it != pending_.end() && it->first == next_order_;
       it = pending_.erase(it)) {
    writer_.write(it->second);
    ++next_order_;
  }
}

bool locked_by_another_writer(const std::string& path) {
  if (standard_stream_of(path) >= 0) return false;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a terminal stays unclaimed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  struct stat st {};
  // A shared probe: it meets only a writer's exclusive lock, not another job's probe of the file.
  const bool locked = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                      ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // drops the probe's lock
  return locked;
}

}  // namespace tpllama
