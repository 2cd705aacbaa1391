// Perplexity's windows file: a header line naming the run, then one line per scored window.
#include "io/window_file.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "io/resume.h"

namespace tpllama {
namespace {

using nlohmann::ordered_json;

constexpr const char* kRunField = "perplexity_windows";

// A non-negative integer field of `object`, or nullopt.
std::optional<long long> count_field(const ordered_json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_number_integer() || it->get<long long>() < 0) return std::nullopt;
  return it->get<long long>();
}

}  // namespace

std::string corpus_hash(const std::vector<int>& tokens) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int t : tokens)
    for (int byte = 0; byte < 4; ++byte) h = (h ^ ((static_cast<uint32_t>(t) >> (8 * byte)) & 0xffu)) * 0x100000001b3ULL;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string window_run_line(const WindowRun& run) {
  ordered_json j;
  j[kRunField] = {{"corpus_tokens", run.corpus_tokens},
                  {"corpus_hash", run.corpus_hash},
                  {"context_len", run.context_len},
                  {"stride", run.stride},
                  {"windows", run.windows}};
  return j.dump() + '\n';
}

std::string window_score_line(const WindowScore& score) {
  ordered_json j = {{"window", score.window}, {"n_tokens", score.n_tokens}, {"nll", score.nll}};
  return j.dump() + '\n';
}

WindowFile read_window_file(const std::string& path) {
  WindowFile file;
  if (!std::filesystem::exists(path)) return file;
  file.truncated_bytes = cut_torn_last_line(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open windows file ", path, " to resume: ", std::strerror(errno));
  std::string text;
  for (size_t line = 1; std::getline(in, text); ++line) {
    const auto bad = [&](const std::string& why) {
      fail("cannot resume from ", path, ": line ", line, " ", why, "; the file is not a tpllama perplexity --windows file");
    };
    ordered_json j;
    try {
      j = ordered_json::parse(text);
    } catch (const ordered_json::exception&) {
      bad("is not JSON: " + clip(text));
    }
    if (!j.is_object()) bad("is not a JSON object");
    if (line == 1) {
      auto it = j.find(kRunField);
      if (it == j.end() || !it->is_object()) bad(std::string("has no \"") + kRunField + "\" object");
      const auto tokens = count_field(*it, "corpus_tokens"), context = count_field(*it, "context_len"),
                 stride = count_field(*it, "stride"), windows = count_field(*it, "windows");
      auto hash = it->find("corpus_hash");
      if (!tokens || !context || !stride || !windows || hash == it->end() || !hash->is_string())
        bad("does not give corpus_tokens, corpus_hash, context_len, stride and windows");
      file.run = WindowRun{*tokens, hash->get<std::string>(), static_cast<int>(*context), static_cast<int>(*stride), *windows};
      continue;
    }
    const auto window = count_field(j, "window"), n_tokens = count_field(j, "n_tokens");
    auto nll = j.find("nll");
    if (!window || !n_tokens || nll == j.end() || !nll->is_number() || !std::isfinite(nll->get<double>()))
      bad("does not give a window, its n_tokens and a finite nll");
    file.scores.push_back({*window, *n_tokens, nll->get<double>()});
  }
  return file;
}

std::string window_run_difference(const WindowRun& file, const WindowRun& here) {
  std::ostringstream os;
  const auto differ = [&](const char* what, const auto& there, const auto& now) {
    if (there == now) return;
    os << (os.tellp() > 0 ? "; " : "") << what << " " << there << " there, " << now << " here";
  };
  differ("corpus tokens", file.corpus_tokens, here.corpus_tokens);
  if (file.corpus_tokens == here.corpus_tokens) differ("corpus hash", file.corpus_hash, here.corpus_hash);
  differ("context_len", file.context_len, here.context_len);
  differ("stride", file.stride, here.stride);
  if (file.context_len == here.context_len && file.stride == here.stride) differ("windows", file.windows, here.windows);
  return os.str();
}

}  // namespace tpllama
