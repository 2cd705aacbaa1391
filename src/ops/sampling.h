// Turning logits into tokens on the device: each row's argmax, draws from sampled rows, and the
// pieces of a log-softmax (sums of exponentials, the chosen logit), so that only small results
// reach the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device_context.h"
#include "core/sampling_params.h"
#include "core/tensor.h"

namespace tpllama::ops {

// The host's sampler over one row of logits (ops/cpu/sampling.h has the definitions): argmax
// (ties to the lowest index); candidate_set, the survivors of temperature, top-k, top-p and min-p
// by probability, renormalised (temperature > 0); sample_with_uniform, the token that u in [0, 1)
// draws from them (argmax when temperature == 0).
struct Candidate {
  int token;
  double prob;
};
int argmax(const float* logits, int n);
std::vector<Candidate> candidate_set(const float* logits, int n, const SamplingParams& p);
int sample_with_uniform(const float* logits, int n, const SamplingParams& p, double u);

// One row to sample: its settings (temperature > 0) and the uniform in [0, 1) of its draw.
struct SampleRow {
  SamplingParams params;
  double uniform = 0;
};
// The token ops/cpu/sampling.h's sample_with_uniform draws from each row of logits (rows, cols)
// f32, over its first n columns, with rows[r]: on a GPU sorted and drawn there, so only the ids
// reach the host. Fails naming the row when its logits have no finite maximum.
std::vector<int32_t> sample_rows(const DeviceContext& ctx, Tensor logits, int n,
                                 const std::vector<SampleRow>& rows);

// Bytes of ctx.scratch sample_rows needs for up to rows × cols logits (0 on the CPU).
size_t sampling_scratch_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols);

// Edits logits (rows, cols) f32 in place, cell by cell: for i < n, the cell at row cells[i][0],
// column cells[i][1] becomes x = (x + bias) then x > 0 ? x / scale : x * scale, then x - subtract,
// with params[i] = (bias, scale, subtract) (model/step_batch.h's LogitEdit). cells (n, 2) i32,
// params (n, 3) f32; no cell twice.
void edit_logits(const DeviceContext& ctx, Tensor logits, Tensor cells, Tensor params);

// Grammar masks: for i < n, every logit of row rows[i] of logits (rows, cols) f32 whose token
// (first_token + its column) has no bit set in words[i] (n, width) i32 bit words (word t / 32,
// bit t % 32; a token past them has none) becomes -inf.
void mask_logits(const DeviceContext& ctx, Tensor logits, Tensor rows, Tensor words,
                 int64_t first_token);

// index[r], value[r] = the largest logit of row r and its column (ties to the lowest column), over
// logits (rows, cols) f32; -1 and +inf where the row holds a NaN or +inf (-inf is a masked logit,
// not a fault). Across shards, MAXLOC then keeps the mark: +inf wins and -1 is the lowest index.
void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits);

// The log-softmax pieces of n rows of the logits, without moving the rows off the device: for
// i < n, sums[i] = Σ_c exp(logits[rows[i]][c] − max[i]) (accumulated in double) and sums[n + i] =
// logits[rows[i]][chosen[i]] where 0 <= chosen[i] < cols, else 0. rows, chosen (n) i32; max (n)
// f32; sums (2n) f32.
void logit_sums(const DeviceContext& ctx, Tensor sums, Tensor logits, Tensor rows, Tensor max,
                Tensor chosen);

}  // namespace tpllama::ops
