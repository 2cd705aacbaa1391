// The checks every command makes on the files it will write, before any work: writable, not the
// input nor the model's files, not another output, not an earlier run's records; which outputs are
// streams (stdout, a pipe) rather than files; and that its input can be read.
#include "app/output_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "engine/output_grammar.h"
#include "io/output_constraint.h"
#include "io/result_writer.h"
#include "model/checkpoint.h"

namespace tpllama {

std::optional<OutputConstraint> checked_response_format(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::optional<OutputConstraint> c = read_response_format_file(path);
  if (c) {
    try {
      compile_constraint(*c);
    } catch (const Error& e) {
      fail("--response-format ", path, ": ", e.what());
    }
  }
  return c;
}

namespace {

void check_writable(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  if (const int stream = standard_stream_of(path); stream >= 0) {
    const int mode = ::fcntl(stream, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY)
      fail("cannot write ", flag, " file ", path, ": the process's ",
           stream == 1 ? "stdout" : "stderr", " is not open for writing");
    return;
  }
  if (path == "/dev/stdout" || path == "/dev/stderr")
    fail("cannot write ", flag, " file ", path, ": the process's ", path.substr(5), " is closed");
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status)) {  // the file (or the device, or a link's target) is there
    if (fs::is_directory(status))
      fail("cannot write ", flag, " file ", path, ": it is a directory");
    if (!fs::is_regular_file(
            status)) {  // a pipe, a terminal, /dev/stdout: opening a FIFO would wait for a reader
      if (::access(path.c_str(), W_OK) != 0)
        fail("cannot write ", flag, " file ", path, ": ", std::strerror(errno));
      return;
    }
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // opening it writes nothing
    if (fd < 0) fail("cannot write ", flag, " file ", path, ": ", std::strerror(errno));
    ::close(fd);
    return;
  }
  // Not there yet: its directory must take a new file. Nothing is created now, so a failure later
  // in the checks leaves no stray file (a dangling link's file would be made where the link
  // points).
  fs::path target = path;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    const fs::path to = fs::read_symlink(target, ec);
    target = to.is_absolute() ? to : target.parent_path() / to;
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    fail("cannot write ", flag, " file ", path, " (", dir.string(),
         fs::exists(dir, ec) ? " is not a directory)" : " does not exist)");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("cannot write ", flag, " file ", path, " (", dir.string(),
         " is not a writable directory: ", std::strerror(errno), ")");
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
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea),
                 cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  return !ea && !eb && ca.lexically_normal() == cb.lexically_normal();
}

// The path with links resolved as far as it exists, absolute and normal ("" when it cannot be).
std::filesystem::path resolved(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) return {};
  p = p.lexically_normal();
  return p.has_filename() ? p : p.parent_path();  // "dir/" ends in an empty name
}

// Whether `inner` is `outer` or lies under it, component by component ("/a/bc" is not under
// "/a/b").
bool is_within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> model_files(const std::string& model_dir,
                                                             const std::string& chat_template) {
  std::vector<std::pair<std::string, std::string>> files;
  if (!chat_template.empty()) files.emplace_back("the --chat-template file", chat_template);
  if (model_dir.empty()) return files;
  const std::string dir = model_dir + "/";
  for (const char* name :
       {"config.json", "model.safetensors", "model.safetensors.index.json", kShardManifestName})
    files.emplace_back("a file of the model", dir + name);
  for (const std::string& name : model_side_files())
    files.emplace_back("a file of the model", dir + name);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(model_dir, ec), end; !ec && it != end;
       it.increment(ec))
    if (it->path().extension() == ".safetensors" && it->path().filename() != "model.safetensors")
      files.emplace_back("a file of the model", it->path().string());  // the index's parts, shards
  return files;
}

void check_not_replacing(const std::string& flag, const std::string& path, bool allowed,
                         const std::string& how) {
  if (allowed || path.empty() || standard_stream_of(path) >= 0) return;
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::is_regular_file(status)) return;  // nothing there yet, or a stream
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec || bytes == 0) return;
  fail(flag, " ", path, " already holds ", bytes, " bytes (an earlier run's records?): ", how,
       "; or give another file");
}

void check_out_directory(const std::string& out,
                         const std::vector<std::pair<std::string, std::string>>& sources) {
  namespace fs = std::filesystem;
  const fs::path to = resolved(out);
  for (const auto& [what, source] : sources) {
    const fs::path from = source.empty() ? fs::path() : resolved(source);
    if (to.empty() || from.empty()) continue;
    std::error_code ec;
    if (to == from || fs::equivalent(out, source, ec))
      fail("--out ", out, " is ", what, " itself (", source, "): write into a new directory");
    if (is_within(from, to))  // its files would be replaced, or read beside the new ones
      fail("--out ", out, " holds ", what, " ", source, ": write into a directory apart from it");
    if (fs::is_directory(from, ec) &&
        is_within(to, from))  // a model directory holding another model
      fail("--out ", out, " lies inside ", what, " ", source,
           ": write into a directory apart from it");
  }
}

// A regular file, or nothing yet (it will be one); not this process's stdout or stderr, even when
// the shell sent those to a file (perhaps both to one).
bool output_is_a_file(const std::string& path) {
  if (standard_stream_of(path) >= 0) return false;
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  return !std::filesystem::exists(status) || std::filesystem::is_regular_file(status);
}

void check_output_files(const std::vector<std::string>& inputs,
                        const std::vector<std::pair<std::string, std::string>>& outputs,
                        const std::vector<std::pair<std::string, std::string>>& read_files) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path.empty()) continue;
    for (const std::string& input : inputs)
      if (!input.empty() && same_file(path, input))
        fail(flag, " ", path, " is the input file itself; refusing to overwrite the input");
    for (const auto& [what, file] : read_files)
      if (same_file(path, file))
        fail(flag, " ", path, " is ", what, " (", file,
             "); refusing to overwrite it: give another file");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].second.empty() && same_file(path, outputs[j].second))
        fail(outputs[j].first, " and ", flag, " both name ", path, "; give each its own file");
    check_writable(path, flag.c_str());
    // Checked, not locked: the command holds its files (OutputHolds) once every check has passed,
    // so that a refused command creates none. A clash that begins in between is caught then.
    if (locked_by_another_writer(path))
      fail(flag, " ", path,
           " is locked by another tpllama process (a running job writes it): wait for it to end, ",
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
