// The output file's sidecar: written when a run creates or truncates its output, read by --resume.
// JSON: {"tpllama_output": {"model", "model_fingerprint", "settings": {flag: value, ...}}}.
#include "io/output_sidecar.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "io/result_writer.h"

namespace tpllama {

std::string sidecar_path(const std::string& output) { return output + ".tpllama.json"; }

std::string setting_number(double value) {
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : std::to_string(value);
}

void write_sidecar(const std::string& output, const OutputJob& job) {
  const std::string path = sidecar_path(output);
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();
  for (const auto& [flag, value] : job.settings) settings[flag] = value;
  const nlohmann::ordered_json j = {
      {"tpllama_output",
       {{"model", job.model}, {"model_fingerprint", job.model_fingerprint}, {"settings", settings}}}};
  // The temporary name is this process's own, so two jobs never write one temporary file.
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  write_text_file(temporary, j.dump(2) + "\n", "sidecar");
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(temporary.c_str());
    fail("cannot write the sidecar ", path, " of ", output, ": ", std::strerror(err));
  }
}

std::optional<OutputJob> read_sidecar(const std::string& output) {
  const std::string path = sidecar_path(output);
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return std::nullopt;
  const auto bad = [&](const std::string& why) {
    fail("--resume: cannot read ", path, " (the sidecar naming the job that made ", output, "): ", why,
         "; remove it to resume without the check");
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
  if (!j.is_object() || top == j.end() || !top->is_object()) bad("it has no \"tpllama_output\" object");
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
  return job;
}

std::string output_job_difference(const std::string& output, const OutputJob& file, const OutputJob& here) {
  std::vector<std::string> differences;
  if (file.model_fingerprint != here.model_fingerprint)
    differences.push_back("--model " + file.model + " (fingerprint " + file.model_fingerprint + "), this run has " +
                          here.model + " (fingerprint " + here.model_fingerprint + ")");
  for (const auto& [flag, value] : here.settings)
    for (const auto& [file_flag, file_value] : file.settings)
      if (file_flag == flag && file_value != value)
        differences.push_back(flag + " " + file_value + ", this run has " + value);
  std::string text;
  for (const std::string& d : differences) text += (text.empty() ? output + " was made with " : "; with ") + d;
  return text;
}

}  // namespace tpllama
