// The CPU sampler over one row of logits: greedy argmax, and temperature / top-k / top-p / min-p
// truncation with the draw given its uniform. ops::sample_rows runs it on the CPU, and the GPU's
// sampling kernels implement the same definition; runtime/sampler.h adds the random streams.
#pragma once

#include <vector>

#include "core/sampling_params.h"

namespace tpllama::ops::cpu {

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

// temperature == 0 → argmax. Otherwise walks the candidate_set's cumulative probabilities to the
// first that exceeds u in [0, 1) (the scheduler on rank 0 owns every request's random stream and
// ships u to the rank that holds the logits).
int sample_with_uniform(const float* logits, int n, const SamplingParams& p, double u);

}  // namespace tpllama::ops::cpu
