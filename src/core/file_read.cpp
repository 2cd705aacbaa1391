// Whole-file reads with limits, and streams read as they come (poll, so a stop signal is seen).
#include "core/file_read.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/byte_size.h"
#include "core/stop_signal.h"

namespace tpllama {
namespace {

constexpr int kPollSliceMs = 200;  // how often a wait looks at the stop signal

// What a stat() result names, for messages.
const char* file_kind(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail("cannot read ", what, " ", path, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(what, " ", path, " is ", file_kind(st),
         ", not a regular file (a FIFO or a device would be waited on or read ",
         "without end): give the file itself");
}

std::string read_regular_file(const std::string& path, const std::string& what,
                              uint64_t max_bytes) {
  require_regular_file(path, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open ", what, " ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced between the two looks
    ::close(fd);
    fail(what, " ", path, " changed while it was opened: not a regular file now");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    fail(what, " ", path, " is ", size, " bytes, over the ", byte_limit_text(max_bytes),
         " limit for such a file: is it the right file?");
  }
  std::string text;
  text.resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, text.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot read ", what, " ", path, ": ", std::strerror(err));
    }
    if (n == 0) break;  // it shrank meanwhile: what is there
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

StreamFile::StreamFile(const std::string& path, const std::string& what)
    : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, deaf to signals.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail("cannot open ", what, " ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail("cannot read ", what, " ", path, ": ", std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    fail("cannot open ", what, " ", path, ": ", std::strerror(EISDIR));
  }
  regular_ = S_ISREG(st.st_mode);
}

StreamFile::~StreamFile() {
  if (fd_ >= 0) ::close(fd_);
}

StreamFile::Got StreamFile::read_some(std::string& out, size_t max_bytes, int timeout_ms) {
  if (!regular_) {
    // A FIFO no writer has opened yet polls as nothing to read (Linux reports POLLHUP only once a
    // writer has come and gone), where a read would say "end of file" at once.
    pollfd p{fd_, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&p, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) fail("cannot read ", what_, " ", path_, ": ", std::strerror(errno));
    if (ready == 0) return Got::kNothingYet;
  }
  const size_t before = out.size();
  out.resize(before + max_bytes);
  ssize_t n;
  do {
    n = ::read(fd_, out.data() + before, max_bytes);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    out.resize(before);
    if (err == EAGAIN || err == EWOULDBLOCK) return Got::kNothingYet;
    fail("cannot read ", what_, " ", path_, ": ", std::strerror(err));
  }
  out.resize(before + static_cast<size_t>(n));
  return n == 0 ? Got::kEnd : Got::kData;
}

std::string read_stream_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  StreamFile file(path, what);
  std::string text;
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    if (const int signal = stop_signal(); signal != 0)
      throw StoppedError(detail::concat("received signal ", signal, " while reading ", what, " ",
                                        path, ": stopped before any work"));
    const size_t room =
        static_cast<size_t>(std::min<uint64_t>(kChunk, max_bytes + 1 - text.size()));
    const StreamFile::Got got = file.read_some(text, room, kPollSliceMs);
    if (got == StreamFile::Got::kEnd) return text;
    if (text.size() > max_bytes)
      fail(what, " ", path, " is over the ", byte_limit_text(max_bytes),
           " limit for such a file (read that far and stopped): is it the right file?");
  }
}

}  // namespace tpllama
