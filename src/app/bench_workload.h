// The synthetic workload of `tpllama bench`: its length ranges, seeded prompts of token ids (or
// scoring requests) as a request source, and the sink that counts what comes back.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/prompt_reader.h"
#include "io/request.h"
#include "io/result_writer.h"
#include "model/config.h"

namespace tpllama {

struct LengthRange {
  int lo = 0, hi = 0;
};

// "128" or "64:256" (inclusive); refused naming `flag` unless every length is at least min_value.
LengthRange parse_range(const std::string& text, const char* flag, int min_value);

// The workload's shape: prompts of `in` tokens generating `out`; with shared_prefix every prompt
// starts with one seeded prefix of that many tokens (BOS included) before its own `in` tokens;
// with continuations each prompt is a context scored with that many continuations of `out` tokens
// (a few-shot multiple-choice evaluation) instead of generating.
struct Workload {
  int prompts = 16;
  LengthRange in, out;
  int shared_prefix = 0;
  int continuations = 0;
  int requests() const { return continuations > 0 ? prompts * continuations : prompts; }
};

// Seeded prompts of token ids: BOS, then ids drawn uniformly from those that are neither BOS nor an
// EOS; greedy; exactly max_tokens generated (or scoring requests, see Workload).
class SyntheticSource : public RequestSource {
 public:
  // constraint: every generation request's (--response-format), or none.
  SyntheticSource(const Workload& w, const LlamaConfig& c, uint64_t seed,
                  std::optional<OutputConstraint> constraint = std::nullopt)
      : w_(w),
        vocab_(c.vocab_size),
        bos_(c.bos_token_id),
        constraint_(std::move(constraint)),
        rng_(seed) {
    special_.push_back(bos_);
    special_.insert(special_.end(), c.eos_token_ids.begin(), c.eos_token_ids.end());
    if (w_.shared_prefix > 0) {
      prefix_.push_back(bos_);
      append_tokens(prefix_, w_.shared_prefix - 1);
    }
  }

  std::optional<Request> next(bool wait) override;
  bool ended() const override { return made_ == w_.requests(); }
  const std::vector<int>& prompt_lengths() const { return lengths_; }
  long long output_tokens() const { return output_tokens_; }

 private:
  void append_tokens(std::vector<int>& ids, int n);
  // The shared prefix (or BOS) and the prompt's own tokens.
  std::vector<int> new_prompt();

  Workload w_;
  int made_ = 0;
  int vocab_, bos_;
  std::optional<OutputConstraint> constraint_;
  std::vector<int> special_;  // BOS and the EOS ids
  std::vector<int> prefix_;
  std::vector<int> context_;  // the current prompt (scoring: shared by its continuations)
  std::mt19937_64 rng_;
  std::vector<int> lengths_;
  long long output_tokens_ = 0;
};

class CountingSink : public ResultSink {
 public:
  void write(const Result& r) override {
    if (r.finish_reason == "error") fail("bench request ", r.id.dump(), " failed: ", r.error);
    ++results_;
  }
  long long results() const { return results_; }

 private:
  long long results_ = 0;
};

}  // namespace tpllama
