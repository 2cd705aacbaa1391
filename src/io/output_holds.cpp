// Holding a job's output files from its start: each is opened (created when missing) and locked
// exclusively, which is what locked_by_another_writer probes for.
#include "io/output_holds.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/result_writer.h"

namespace tpllama {
namespace {

// A descriptor on `path` for its lock, and whether opening it made the file. O_NONBLOCK: a FIFO
// that appeared since the checks must not wait for a reader (it is not held: see hold).
int open_for_hold(const std::string& path, bool& created) {
  constexpr int kFlags = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  created = true;
  int fd = ::open(path.c_str(), kFlags | O_CREAT | O_EXCL, 0644);
  if (fd >= 0 || errno != EEXIST) return fd;
  created = false;
  fd = ::open(path.c_str(), kFlags);
  if (fd >= 0 || errno != ENOENT) return fd;
  created = true;  // a dangling link: O_EXCL refuses a link, so its target is made through it
  return ::open(path.c_str(), kFlags | O_CREAT, 0644);
}

bool same_inode(int fd, const std::string& path) {
  struct stat held {
  }, named{};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

OutputHolds::~OutputHolds() {
  const bool failed = std::uncaught_exceptions() > exceptions_;
  for (Held& h : held_) let_go(h, failed);
}

void OutputHolds::hold(const std::string& flag, const std::string& path) {
  if (path.empty() || standard_stream_of(path) >= 0 || holds(path)) return;
  bool created = false;
  const int fd = open_for_hold(path, created);
  if (fd < 0)
    fail("cannot open ", flag, " file ", path, " to hold it for this job: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 ||
      !S_ISREG(st.st_mode)) {  // a pipe or a device: written as it comes, not held
    ::close(fd);
    return;
  }
  Held h{path, "", fd};
  if (created) {
    std::error_code ec;
    h.created = std::filesystem::canonical(path, ec).string();
    if (ec) h.created = path;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);  // a file made just now that another process locks at once is that process's
    if (err == EWOULDBLOCK)
      fail(flag, " ", path,
           " is locked by another tpllama process (a running job writes it): wait for it to end, ",
           "or give another file");
    fail("cannot lock ", flag, " file ", path, ": ", std::strerror(err));
  }
  held_.push_back(std::move(h));
}

void OutputHolds::let_go(Held& h, bool remove_if_empty) {
  if (h.fd < 0) return;
  struct stat st {};
  // Removed only while still locked, and only the very file made: a link put in its place since, or
  // a file another job wrote, is not ours to remove.
  const bool remove = remove_if_empty && !h.created.empty() && ::fstat(h.fd, &st) == 0 &&
                      st.st_size == 0 && same_inode(h.fd, h.created);
  if (remove) ::unlink(h.created.c_str());
  ::close(h.fd);
  h.fd = -1;
}

void OutputHolds::release(const std::string& path) {
  for (Held& h : held_)
    if (h.path == path) let_go(h, false);
}

void OutputHolds::drop_if_unwritten(const std::string& path) {
  for (Held& h : held_) {
    struct stat st {};
    if (h.path == path && h.fd >= 0 && !h.created.empty() && ::fstat(h.fd, &st) == 0 &&
        st.st_size == 0)
      let_go(h, true);
  }
}

void OutputHolds::take_over(const std::string& path, int fd) {
  for (Held& h : held_)
    if (h.path == path && h.fd >= 0) {
      ::close(h.fd);
      h.fd = fd;
      h.created.clear();  // the new file is written: never removed as an empty one the hold made
      return;
    }
  held_.push_back({path, "", fd});
}

bool OutputHolds::holds(const std::string& path) const {
  for (const Held& h : held_)
    if (h.path == path && h.fd >= 0) return true;
  return false;
}

}  // namespace tpllama
