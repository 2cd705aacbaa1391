// Perplexity's windows, and its windows file: a header line naming the run, then one line per
// scored window.
#include "io/window_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_text.h"

namespace tpllama {
namespace {

using nlohmann::ordered_json;

constexpr const char* kRunField = "perplexity_windows";

// A non-negative integer field of `object`, or nullopt.
std::optional<long long> count_field(const ordered_json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_number_integer() || it->get<long long>() < 0)
    return std::nullopt;
  return it->get<long long>();
}

}  // namespace

std::vector<Window> plan_windows(int n_tokens, int window, int stride) {
  std::vector<Window> windows;
  for (int begin = 0, prev_end = 0; n_tokens > 0; begin += stride) {
    const int end = std::min(begin + window, n_tokens);
    windows.push_back({begin, end, end - std::max(prev_end, begin)});
    prev_end = end;
    if (end == n_tokens) break;
  }
  return windows;
}

std::string corpus_hash(const std::vector<int>& tokens) {
  Fnv1a h;
  for (int t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    const unsigned char bytes[4] = {
        static_cast<unsigned char>(u), static_cast<unsigned char>(u >> 8),
        static_cast<unsigned char>(u >> 16), static_cast<unsigned char>(u >> 24)};
    h.add(bytes, sizeof bytes);  // little-endian on every machine
  }
  return h.hex();
}

std::string model_fingerprint(const std::string& model_dir) {
  namespace fs = std::filesystem;
  Fnv1a h;
  std::vector<fs::path> weights;
  for (const fs::directory_entry& e : fs::directory_iterator(model_dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") weights.push_back(e.path());
  std::sort(weights.begin(), weights.end());
  std::vector<fs::path> files = {fs::path(model_dir) / "config.json"};
  files.insert(files.end(), weights.begin(), weights.end());
  constexpr size_t kBlock = 4096, kBlocks = 16;
  std::vector<char> block(kBlock);
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("cannot read ", file.string(), " to fingerprint the model");
    const std::string name = file.filename().string();
    const uint64_t size = fs::file_size(file);
    h.add(name.data(), name.size() + 1);  // with its '\0': no name runs into the next field
    h.add(&size, sizeof size);
    const bool whole = file.filename() == "config.json" || size <= kBlock * kBlocks;
    const size_t reads = whole ? (size + kBlock - 1) / kBlock : kBlocks;
    for (size_t i = 0; i < reads; ++i) {
      const uint64_t at = whole ? i * kBlock : (size - kBlock) * i / (kBlocks - 1);
      in.seekg(static_cast<std::streamoff>(at));
      in.read(block.data(), static_cast<std::streamsize>(kBlock));
      h.add(block.data(), static_cast<size_t>(in.gcount()));
      in.clear();
    }
  }
  return h.hex();
}

bool starts_like_a_window_header(const std::string& text) {
  const std::string start = std::string("{\"") + kRunField + "\":";  // as window_run_line writes it
  const size_t n = std::min(text.size(), start.size());
  return text.compare(0, n, start, 0, n) == 0;
}

std::string window_run_line(const WindowRun& run) {
  ordered_json j;
  j[kRunField] = {{"model", run.model},
                  {"model_fingerprint", run.model_fingerprint},
                  {"dtype", run.dtype},
                  {"kv_dtype", run.kv_dtype},
                  {"corpus_tokens", run.corpus_tokens},
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
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) return file;
  if (status.type() != std::filesystem::file_type::regular)
    fail("cannot resume from ", path, ": it is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open windows file ", path, " to resume: ", std::strerror(errno));
  std::string text;
  for (size_t line = 1; std::getline(in, text); ++line) {
    if (in.eof()) {  // no '\n' after it: torn
      file.torn_bytes = text.size();
      file.torn_start = text.substr(0, 64);
      break;
    }
    const auto bad = [&](const std::string& why) {
      fail("cannot resume from ", path, ": line ", line, " ", why,
           "; the file is not a tpllama perplexity --windows file");
    };
    ordered_json j;
    try {
      j = parse_ordered_json(text, detail::concat("cannot resume from ", path, ": line ", line));
    } catch (const ordered_json::exception&) {
      bad("is not JSON: " + clip(text));
    }
    if (!j.is_object()) bad("is not a JSON object");
    if (line == 1) {
      auto it = j.find(kRunField);
      if (it == j.end() || !it->is_object())
        bad(std::string("has no \"") + kRunField + "\" object");
      const auto tokens = count_field(*it, "corpus_tokens"),
                 context = count_field(*it, "context_len"), stride = count_field(*it, "stride"),
                 windows = count_field(*it, "windows");
      const auto text_field = [&](const char* field) -> std::optional<std::string> {
        auto v = it->find(field);
        if (v == it->end() || !v->is_string()) return std::nullopt;
        return v->get<std::string>();
      };
      const auto model = text_field("model"), fingerprint = text_field("model_fingerprint"),
                 dtype = text_field("dtype"), kv_dtype = text_field("kv_dtype"),
                 hash = text_field("corpus_hash");
      if (!model || !fingerprint || !dtype || !kv_dtype || !tokens || !hash || !context ||
          !stride || !windows)
        bad("does not give model, model_fingerprint, dtype, kv_dtype, corpus_tokens, corpus_hash, "
            "context_len, stride "
            "and windows");
      file.run = WindowRun{*model,
                           *fingerprint,
                           *dtype,
                           *kv_dtype,
                           *tokens,
                           *hash,
                           static_cast<int>(*context),
                           static_cast<int>(*stride),
                           *windows};
      continue;
    }
    const auto window = count_field(j, "window"), n_tokens = count_field(j, "n_tokens");
    auto nll = j.find("nll");
    if (!window || !n_tokens || nll == j.end() || !nll->is_number() ||
        !std::isfinite(nll->get<double>()))
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
  // The name alone may differ (a copy staged elsewhere): the files decide.
  if (file.model_fingerprint != here.model_fingerprint)
    differ("model", file.model + " (fingerprint " + file.model_fingerprint + ")",
           here.model + " (fingerprint " + here.model_fingerprint + ")");
  differ("dtype", file.dtype, here.dtype);
  differ("kv_dtype", file.kv_dtype, here.kv_dtype);
  differ("corpus tokens", file.corpus_tokens, here.corpus_tokens);
  if (file.corpus_tokens == here.corpus_tokens)
    differ("corpus hash", file.corpus_hash, here.corpus_hash);
  differ("context_len", file.context_len, here.context_len);
  differ("stride", file.stride, here.stride);
  if (file.context_len == here.context_len && file.stride == here.stride)
    differ("windows", file.windows, here.windows);
  return os.str();
}

}  // namespace tpllama
