// Token sampling: a platform-independent RNG, greedy argmax, and temperature/top-k/top-p/min-p
// truncation, so a request's seed reproduces the same tokens everywhere.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/sampling_params.h"

namespace tpllama {

// xoshiro256** seeded through splitmix64: fully specified, unlike the std:: distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

// Index of the largest logit; ties go to the lowest index.
int argmax(const float* logits, int n);

struct Candidate {
  int token;
  double prob;
};

// Applies temperature (softmax of logits / T in double, max subtracted), then top_k (ties toward
// the lower id), then top_p on the renormalised top-k set (smallest most-probable prefix reaching
// top_p), then min_p (p >= min_p * p_max). Returns the survivors by prob desc (ties: lower id
// first) with probs renormalised to sum 1. Requires temperature > 0.
std::vector<Candidate> candidate_set(const float* logits, int n, const SamplingParams& p);

// temperature == 0 → argmax (rng untouched). Otherwise draws u = rng.uniform() once and walks the
// candidate_set's cumulative probabilities.
int sample(const float* logits, int n, const SamplingParams& p, Rng& rng);

// The draw of sample() with its uniform u in [0, 1) given: the scheduler on rank 0 owns every
// request's random stream and ships u to the rank that holds the logits.
int sample_with_uniform(const float* logits, int n, const SamplingParams& p, double u);

}  // namespace tpllama
