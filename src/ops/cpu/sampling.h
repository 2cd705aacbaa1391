// The CPU sampler over one row of logits: greedy argmax, and temperature / top-k / top-p / min-p
// truncation with the draw given its uniform, and the row ops of ops/sampling.h on the CPU. The
// GPU's sampling kernels implement the same definition; core/random.h has the random streams.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sampling_params.h"
#include "core/tensor.h"
#include "ops/sampling.h"

namespace tpllama::ops::cpu {

// Index of the largest logit; ties go to the lowest index.
int argmax(const float* logits, int n);

using ops::Candidate;

// Applies temperature (softmax of logits / T in double, max subtracted), then top_k (ties toward
// the lower id), then top_p on the renormalised top-k set (smallest most-probable prefix reaching
// top_p), then min_p (p >= min_p * p_max). Returns the survivors by prob desc (ties: lower id
// first) with probs renormalised to sum 1. Requires temperature > 0.
std::vector<Candidate> candidate_set(const float* logits, int n, const SamplingParams& p);

// temperature == 0 → argmax. Otherwise walks the candidate_set's cumulative probabilities to the
// first that exceeds u in [0, 1) (the scheduler on rank 0 owns every request's random stream and
// ships u to the rank that holds the logits).
int sample_with_uniform(const float* logits, int n, const SamplingParams& p, double u);

// The bodies of ops/sampling.h on the CPU, called after validation: sample_with_uniform of each row
// (over its first n columns), each row's argmax, and the log-softmax sums of the given rows.
std::vector<int32_t> sample_rows(Tensor logits, int n, const std::vector<SampleRow>& rows);
void edit_logits(Tensor logits, Tensor cells, Tensor params);
void mask_logits(Tensor logits, Tensor rows, Tensor words, int64_t first_token);
void argmax_rows(Tensor index, Tensor value, Tensor logits);
void logit_sums(Tensor sums, Tensor logits, Tensor rows, Tensor max, Tensor chosen);

}  // namespace tpllama::ops::cpu
