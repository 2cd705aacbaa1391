// The output file's sidecar: written when a run creates or truncates its output, read by --resume.
// JSON: {"tpllama_output": {"model", "model_fingerprint", "settings": {flag: value, ...},
// "files": {name: content hash, ...}}}.
#include "io/output_sidecar.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "io/output_holds.h"

namespace tpllama {

std::string sidecar_path(const std::string& output) {
  return output + ".tpllama.json";
}

std::string setting_number(double value) {
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : std::to_string(value);
}

namespace {

// FNV-1a 64 of the whole file, or "none" when nothing is there.
std::string content_hash(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "none";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("cannot read ", path,
         " to fingerprint the files that shape the records: ", std::strerror(errno));
  Fnv1a h;
  std::vector<char> block(size_t{1} << 16);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0)
    h.add(block.data(), static_cast<size_t>(in.gcount()));
  if (in.bad()) fail("error reading ", path, " to fingerprint the files that shape the records");
  return h.hex();
}

// The new sidecar's text, written whole to a file of this process's own name (two jobs never
// share one), locked first when it is to be held. Returns its descriptor.
int write_temporary(const std::string& temporary, const std::string& text, bool lock) {
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot write the sidecar ", temporary, ": ", std::strerror(errno));
  const char* p = text.data();
  size_t left = text.size();
  int err = lock && ::flock(fd, LOCK_EX | LOCK_NB) != 0 ? errno : 0;
  while (err == 0 && left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
    } else {
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (err != 0) {
    ::close(fd);
    std::remove(temporary.c_str());
    fail("cannot write the sidecar ", temporary, ": ", std::strerror(err));
  }
  return fd;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> shaping_files(const std::string& model_dir,
                                                               const std::string& chat_template) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const char* name :
       {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    files.emplace_back(name, content_hash(model_dir + "/" + name));
  // The template used: --chat-template's file replaces the model's (whose own file is then unread).
  if (chat_template.empty())
    files.emplace_back("chat_template.jinja", content_hash(model_dir + "/chat_template.jinja"));
  else
    files.emplace_back("--chat-template", content_hash(chat_template));
  return files;
}

void write_sidecar(const std::string& output, const OutputJob& job, OutputHolds* holds) {
  const std::string path = sidecar_path(output);
  nlohmann::ordered_json settings = nlohmann::ordered_json::object(),
                         files = nlohmann::ordered_json::object();
  for (const auto& [flag, value] : job.settings) settings[flag] = value;
  for (const auto& [name, hash] : job.files) files[name] = hash;
  const nlohmann::ordered_json j = {{"tpllama_output",
                                     {{"model", job.model},
                                      {"model_fingerprint", job.model_fingerprint},
                                      {"settings", settings},
                                      {"files", files}}}};
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  const int fd = write_temporary(temporary, j.dump(2) + "\n", holds != nullptr);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::close(fd);
    std::remove(temporary.c_str());
    fail("cannot write the sidecar ", path, " of ", output, ": ", std::strerror(err));
  }
  if (holds != nullptr)
    holds->take_over(path, fd);
  else
    ::close(fd);
}

std::optional<OutputJob> read_sidecar(const std::string& output) {
  const std::string path = sidecar_path(output);
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return std::nullopt;
  const auto bad = [&](const std::string& why) {
    fail("--resume: cannot read ", path, " (the sidecar naming the job that made ", output,
         "): ", why, "; remove it to resume without the check");
  };
  std::string text;
  try {
    text = read_regular_file(path, "sidecar", kMaxSmallFileBytes);
  } catch (const Error& e) {
    bad(e.what());
  }
  nlohmann::ordered_json j;
  try {
    j = parse_ordered_json(text, path);
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not valid JSON (") + e.what() + ")");
  }
  const auto top = j.is_object() ? j.find("tpllama_output") : j.end();
  if (!j.is_object() || top == j.end() || !top->is_object())
    bad("it has no \"tpllama_output\" object");
  OutputJob job;
  const auto text_field = [&](const char* key) {
    const auto it = top->find(key);
    if (it == top->end() || !it->is_string()) bad(std::string("\"") + key + "\" is not a string");
    return it->get<std::string>();
  };
  job.model = text_field("model");
  job.model_fingerprint = text_field("model_fingerprint");
  const auto settings = top->find("settings");
  if (settings == top->end() || !settings->is_object()) bad("\"settings\" is not an object");
  for (const auto& [flag, value] : settings->items()) {
    if (!value.is_string()) bad("setting \"" + flag + "\" is not a string");
    job.settings.emplace_back(flag, value.get<std::string>());
  }
  const auto files = top->find("files");  // none in an older tpllama's sidecar
  if (files != top->end()) {
    if (!files->is_object()) bad("\"files\" is not an object");
    for (const auto& [name, hash] : files->items()) {
      if (!hash.is_string()) bad("file \"" + name + "\" is not a string");
      job.files.emplace_back(name, hash.get<std::string>());
    }
  }
  return job;
}

namespace {

// "with tokenizer.json of content X, this run reads Y: ..." for a file whose content differs.
std::string file_difference(const OutputJob& here, const std::string& name, const std::string& then,
                            const std::string& now) {
  const std::string file = name == "--chat-template" ? "the --chat-template file"
                           : here.model_dir.empty()  ? name
                                                     : here.model_dir + "/" + name;
  if (then == "none")
    return "no " + name + ", this run reads " + file + ": the file was added since";
  if (now == "none") return file + " of content " + then + ", which is gone now";
  return file + " of content " + then + ", this run reads " + now + ": the file changed since";
}

}  // namespace

std::string output_job_difference(const std::string& output, const OutputJob& file,
                                  const OutputJob& here) {
  std::vector<std::string> differences;
  if (file.model_fingerprint != here.model_fingerprint)
    differences.push_back("--model " + file.model + " (fingerprint " + file.model_fingerprint +
                          "), this run has " + here.model + " (fingerprint " +
                          here.model_fingerprint + ")");
  for (const auto& [flag, value] : here.settings)
    for (const auto& [file_flag, file_value] : file.settings)
      if (file_flag == flag && file_value != value)
        differences.push_back(flag + " " + file_value + ", this run has " + value);
  for (const auto& [name, hash] : here.files)
    for (const auto& [file_name, file_hash] : file.files)
      if (file_name == name && file_hash != hash)
        differences.push_back(file_difference(here, name, file_hash, hash));
  std::string text;
  for (const std::string& d : differences)
    text += (text.empty() ? output + " was made with " : "; with ") + d;
  return text;
}

}  // namespace tpllama
