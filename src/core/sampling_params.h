// Per-request sampling settings, resolved from the command line defaults and the request's own
// fields. temperature 0 means greedy.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/random.h"

namespace tpllama {

// How a row's token is drawn from its logits (after the LogitRules' edits).
struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax, ties to the lowest token id)
  int top_k = 0;             // 0 or negative: off
  double top_p = 1.0;        // 1: off; keeps the smallest most-probable set reaching top_p
  double min_p = 0.0;        // 0: off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;         // the request's own random stream
};

// The random stream of sample `index` of a request of n samples: sample 0 draws from the request's
// own seed (so n = 1 is a request like any other), sample k > 0 from splitmix64(seed ^ k * gamma),
// which a request of n = 1 may be given as its seed to reproduce sample k alone.
inline uint64_t sample_seed(uint64_t seed, int index) {
  return index == 0 ? seed : splitmix64(seed ^ (static_cast<uint64_t>(index) * kSplitmix64Gamma));
}

// What changes a row's logits before it is drawn from, in vLLM's order: logit_bias is added, then
// repetition_penalty divides a positive logit and multiplies a negative one of every token of the
// prompt and the completion so far, then frequency_penalty × (the token's count in the completion)
// and presence_penalty (once, if it occurs there) are subtracted. While fewer than min_tokens are
// generated, the request's stop ids are banned (-inf). Each at its default changes nothing.
struct LogitRules {
  double presence_penalty = 0.0;    // [-2, 2]
  double frequency_penalty = 0.0;   // [-2, 2]
  double repetition_penalty = 1.0;  // > 0
  int min_tokens = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id → [-100, 100], by id, unique

  bool penalizes() const {
    return presence_penalty != 0.0 || frequency_penalty != 0.0 || repetition_penalty != 1.0;
  }
};

}  // namespace tpllama
