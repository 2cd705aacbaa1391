// The checks every command makes on the files it will write, before any work: writable, not the
// input, not another output; which outputs are streams (stdout, a pipe) rather than files; and that
// its input can be read.
#include "app/output_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/result_writer.h"

namespace tpllama {

namespace {

void check_writable(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  if (const int stream = standard_stream_of(path); stream >= 0) {
    const int mode = ::fcntl(stream, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY)
      fail("cannot write ", flag, " file ", path, ": the process's ", stream == 1 ? "stdout" : "stderr",
           " is not open for writing");
    return;
  }
  if (path == "/dev/stdout" || path == "/dev/stderr")
    fail("cannot write ", flag, " file ", path, ": the process's ", path.substr(5), " is closed");
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status)) {  // the file (or the device, or a link's target) is there
    if (fs::is_directory(status)) fail("cannot write ", flag, " file ", path, ": it is a directory");
    if (!fs::is_regular_file(status)) {  // a pipe, a terminal, /dev/stdout: opening a FIFO would wait for a reader
      if (::access(path.c_str(), W_OK) != 0) fail("cannot write ", flag, " file ", path, ": ", std::strerror(errno));
      return;
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // opening it writes nothing
    if (fd < 0) fail("cannot write ", flag, " file ", path, ": ", std::strerror(errno));
    ::close(fd);
    return;
  }
  // Not there yet: its directory must take a new file. Nothing is created now, so a failure later in
  // the checks leaves no stray file (a dangling link's file would be made where the link points).
  fs::path target = path;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    const fs::path to = fs::read_symlink(target, ec);
    target = to.is_absolute() ? to : target.parent_path() / to;
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) fail("cannot write ", flag, " file ", path, " (", dir.string(), fs::exists(dir, ec) ? " is not a directory)" : " does not exist)");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("cannot write ", flag, " file ", path, " (", dir.string(), " is not a writable directory: ", std::strerror(errno),
         ")");
}

// Whether two paths name one regular file, or would (neither exists yet and they resolve alike,
// however spelt: "out.json", "./out.json", "$PWD/out.json"). Devices, pipes and this process's
// stdout and stderr are never "the same file" (stdout and stderr may both be one log file, and
// what goes to them is appended through their descriptors).
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  for (const std::string* p : {&a, &b})
    if (standard_stream_of(*p) >= 0) return false;
  std::error_code ea, eb;
  const fs::file_status sa = fs::status(a, ea), sb = fs::status(b, eb);
  const bool a_there = fs::exists(sa), b_there = fs::exists(sb);
  if ((a_there && !fs::is_regular_file(sa)) || (b_there && !fs::is_regular_file(sb))) return false;
  if (a_there && b_there) return fs::equivalent(a, b);
  if (a_there != b_there) return false;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea), cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  return !ea && !eb && ca.lexically_normal() == cb.lexically_normal();
}

}  // namespace

// A regular file, or nothing yet (it will be one); not this process's stdout or stderr, even when
// the shell sent those to a file (perhaps both to one).
bool output_is_a_file(const std::string& path) {
  if (standard_stream_of(path) >= 0) return false;
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  return !std::filesystem::exists(status) || std::filesystem::is_regular_file(status);
}

void check_output_files(const std::vector<std::string>& inputs,
                        const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path.empty()) continue;
    for (const std::string& input : inputs)
      if (!input.empty() && same_file(path, input))
        fail(flag, " ", path, " is the input file itself; refusing to overwrite the input");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].second.empty() && same_file(path, outputs[j].second))
        fail(outputs[j].first, " and ", flag, " both name ", path, "; give each its own file");
    check_writable(path, flag.c_str());
    // Checked, not locked: the lock comes when the file is opened (after loading), and taking it
    // now would create the file. A clash that begins later is caught then.
    if (locked_by_another_writer(path))
      fail(flag, " ", path, " is locked by another tpllama process (a running job writes it): wait for it to end, ",
           "or give another file");
  }
}

void check_input_file(const std::string& path) {
  if (!std::filesystem::exists(path)) fail("prompt file ", path, " does not exist");
  if (std::filesystem::is_directory(path)) fail("prompt file ", path, " is a directory");
  if (std::filesystem::is_regular_file(path)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot read prompt file ", path, ": ", std::strerror(errno));
    ::close(fd);
  }
}

}  // namespace tpllama
