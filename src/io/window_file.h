// Perplexity's windows over the corpus, and its windows file (--windows): what a `tpllama
// perplexity` run has scored, one line per window, so a stopped run goes on from there with
// --resume. The first line names the run — the model and its dtypes, the corpus's tokens, and the
// window and stride over them — so a resume with another model, corpus or windows is refused
// instead of mixing two runs' scores.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tpllama {

// One window over the corpus tokens, as in the Hugging Face strided-perplexity recipe: BOS plus
// tokens [begin, end); the last `scored` of them are scored, with everything before as context
// (the rest were scored by an earlier window).
struct Window {
  int begin = 0, end = 0, scored = 0;
};

// Windows start every `stride` tokens until one reaches the end of the corpus.
std::vector<Window> plan_windows(int n_tokens, int window, int stride);

struct WindowRun {
  std::string model;              // the model directory's name
  std::string model_fingerprint;  // model_fingerprint() of it
  std::string dtype, kv_dtype;    // how the weights and the KV cache were held
  long long corpus_tokens = 0;
  std::string corpus_hash;  // corpus_hash() of the tokens
  int context_len = 0;      // tokens per window, BOS included
  int stride = 0;
  long long windows = 0;
};

struct WindowScore {
  long long window = 0;    // 0, 1, ... in corpus order
  long long n_tokens = 0;  // tokens the window scored
  double nll = 0;          // their summed negative log-likelihood, nats
};

// FNV-1a 64 over the token ids, as 16 hex digits.
std::string corpus_hash(const std::vector<int>& tokens);
// FNV-1a 64, as 16 hex digits, over the model directory's config.json and, for each *.safetensors
// file in name order, its name, size and 16 blocks of 4 KiB spread over it (the first and the last
// among them): another model, a fine-tuned one of the same shape included, differs, while a copy
// of the directory elsewhere (staged to a node's local disk) does not. Reads about 64 KiB a file.
std::string model_fingerprint(const std::string& model_dir);

// The file's lines, each ending in '\n'. Doubles are written to round-trip exactly.
std::string window_run_line(const WindowRun& run);
std::string window_score_line(const WindowScore& score);

struct WindowFile {
  std::optional<WindowRun> run;  // none: the file is missing or empty
  std::vector<WindowScore> scores;
  size_t torn_bytes = 0;   // after the last '\n': a line a kill cut short (not read)
  std::string torn_start;  // its first bytes (up to 64)
};

// Whether `text` can be the start of a header line (a header a kill cut short).
bool starts_like_a_window_header(const std::string& text);

// Reads a windows file for --resume, changing nothing (the caller cuts the torn last line, with
// cut_torn_last_line, once it knows the file is this run's). Throws Error naming the file and line
// for a line that is not what window_run_line (first) or window_score_line (after) write, and for
// a path that is not a regular file.
WindowFile read_window_file(const std::string& path);

// What differs between the run a file names and this one, e.g. "stride 128 there, 64 here"; empty
// when they are the same run.
std::string window_run_difference(const WindowRun& file, const WindowRun& here);

}  // namespace tpllama
