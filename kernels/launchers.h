// Host-callable launchers of the CUDA kernels in kernels/*.cu: raw device pointers, sizes and a
// stream; nothing of Tensor, the model or MPI. Element types: float or __nv_bfloat16 (named by
// KernelType), accumulation and softmax in fp32. Every launcher returns the launch's error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tpllama::kernels {

enum class KernelType { kF32, kBF16 };

// x[i] += y[i]
cudaError_t add(void* x, const void* y, int64_t n, KernelType t, cudaStream_t stream);
// x (rows, cols) of type t += bias (cols) f32 on every row.
cudaError_t add_bias(void* x, const float* bias, int64_t rows, int64_t cols, KernelType t,
                     cudaStream_t stream);
// out[i] = silu(gate[i]) * up[i] (gate and up of type t; out of out_t, may alias gate when alike)
cudaError_t silu_mul(void* out, KernelType out_t, const void* gate, const void* up, int64_t n,
                     KernelType t, cudaStream_t stream);
// dst (dst_type) = src (src_type), n elements; bf16 rounds to nearest even.
cudaError_t convert(void* dst, KernelType dst_type, const void* src, KernelType src_type, int64_t n,
                    cudaStream_t stream);
// out (rows, d, out_t) = x (x_t) / sqrt(mean(x²) + eps) * weight (d, f32); out may alias x when
// alike.
cudaError_t rms_norm(void* out, KernelType out_t, const void* x, KernelType x_t,
                     const float* weight, int64_t rows, int64_t d, float eps, cudaStream_t stream);
// Rotate-half RoPE in place on x (rows, n_heads*head_dim) with per-row cos/sin (rows, head_dim/2,
// f32).
cudaError_t rope(void* x, const float* cos, const float* sin, int64_t rows, int n_heads,
                 int head_dim, KernelType t, cudaStream_t stream);
// out (rows, d) = table[tokens[r] - vocab_begin] where this rank holds it, else 0 (vocab-parallel).
cudaError_t embedding(void* out, const void* table, int64_t table_rows, const int32_t* tokens,
                      int64_t rows, int64_t d, int vocab_begin, KernelType t, cudaStream_t stream);
// index[r], value[r] = argmax over row r of logits (rows, cols, f32); ties to the lowest index; -1
// and +inf where the row holds a NaN or +inf.
cudaError_t argmax_rows(int32_t* index, float* value, const float* logits, int64_t rows,
                        int64_t cols, cudaStream_t stream);
// For i < n: the logit at row cells[2i], column cells[2i + 1] of logits (rows, cols, f32) becomes
// x = (x + bias) then x > 0 ? x / scale : x * scale, then x - subtract, with (bias, scale,
// subtract) = params[3i..3i+2] (ops/sampling.h's edit_logits; cells out of range are skipped).
cudaError_t edit_logits(float* logits, int64_t rows, int64_t cols, const int32_t* cells,
                        const float* params, int64_t n, cudaStream_t stream);
// For i < n: every logit of row rows[i] of logits (cols wide, f32) whose token first_token + c has
// no bit in words[i * width ..] (bit t of word t / 32; none past width words) becomes -inf
// (ops/sampling.h's mask_logits).
cudaError_t mask_logits(float* logits, int64_t cols, const int32_t* rows, int64_t n,
                        const uint32_t* words, int64_t width, int64_t first_token,
                        cudaStream_t stream);
// For i < n: sums[i] = sum over c of exp(logits[rows[i]][c] - max[i]) (double accumulation), sums[n
// + i] = logits[rows[i]][chosen[i]] where 0 <= chosen[i] < cols, else 0 (logits f32, cols wide).
cudaError_t logit_sums(float* sums, const float* logits, int64_t cols, const int32_t* rows,
                       const float* max, const int32_t* chosen, int64_t n, cudaStream_t stream);

// Paged attention of each token over its own sequence's cache (causal: n_ctx[m] positions), for
// decode and prefill alike, with an online softmax (no score matrix). The key and value pools (f32
// or bf16, kv_t) hold one position per row of n_kv_heads*head_dim; token m reads the block table of
// its sequence, block_tables + seq[m] * max_blocks. q, out: (tokens, n_heads*head_dim). With splits
// > 1 the context is split along the sequence into partial results (attention_partial_bytes of
// device memory at `partial`) merged by a second kernel. With runs (n_runs pairs of [first token,
// length]: the step's tokens as maximal runs of one sequence at consecutive positions) of which one
// is longer than 1 (max_run), a run-tiled kernel takes the whole step instead.
struct AttentionParams {
  void* out = nullptr;
  const void* q = nullptr;
  const void* keys = nullptr;
  const void* values = nullptr;
  const int32_t* block_tables = nullptr;  // (n_seqs, max_blocks)
  const int32_t* seq = nullptr;           // (tokens)
  const int32_t* n_ctx = nullptr;         // (tokens)
  float* partial = nullptr;
  const int32_t* runs = nullptr;  // (n_runs, 2), or null
  int n_runs = 0;
  int max_run = 0;
  int tiles_per_run = 0;  // set by the launcher
  int64_t tokens = 0;
  int max_blocks = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // at most 256
  int block_size = 0;
  int splits = 1;
  float scale = 0;
  int window = 0;  // a query at position p sees [p - window + 1, p]; 0: [0, p]
  // Runs of a bf16 cache with head_dim 64 or 128 on sm_80+ go to the tensor-core kernel (the
  // probabilities rounded to bf16, q kept to about 16 bits); false keeps the fp32 run kernel.
  bool use_tensor_cores = true;
};
// q of type t, out of out_t, the KV pools of kv_t.
cudaError_t attention(const AttentionParams& p, KernelType t, KernelType out_t, KernelType kv_t,
                      cudaStream_t stream);
// Whether attention() takes runs (prefill) of this shape and cache dtype on tensor cores.
bool attention_uses_tensor_cores(const AttentionParams& p, KernelType kv_t);
// How many splits along the sequence fill a GPU of sm_count multiprocessors (1: none).
int attention_splits(int64_t tokens, int n_heads, int max_ctx, int sm_count);
size_t attention_partial_bytes(int64_t tokens, int n_heads, int head_dim, int splits);

// dst row i ← src row src_rows[i], for i < n; row_bytes a multiple of 4 (any element type).
cudaError_t gather_rows(void* dst, const void* src, const int32_t* src_rows, int64_t n,
                        int64_t row_bytes, cudaStream_t stream);
// dst row dst_rows[i] (dst_t) <- src row i (src_t), width elements each, for i < n: the KV-cache
// write into a cache of another dtype.
cudaError_t convert_rows(void* dst, KernelType dst_t, const int32_t* dst_rows, const void* src,
                         KernelType src_t, int64_t n, int64_t width, cudaStream_t stream);
// Seeded uniform values (ops::UniformFill has the definition): out (rows, cols) of type t, element
// (r, c) = fma(scale, u, offset) with u from splitmix64(stream + (row0 + r) * full_cols + col0 +
// c), 0 from row `present` on; the same bits as the CPU's fill.
struct UniformFill {
  uint64_t stream;
  int64_t full_cols, row0, col0, present;
  float scale, offset;
};
cudaError_t fill_uniform(void* out, KernelType t, int64_t rows, int64_t cols, const UniformFill& f,
                         cudaStream_t stream);
// x[r][c] = value for r < rows, col_begin <= c < cols (f32).
cudaError_t fill_columns(float* x, int64_t rows, int64_t cols, int64_t col_begin, float value,
                         cudaStream_t stream);

// One draw per row of logits (rows, cols, f32) over its first n columns, as the CPU sampler
// (ops/cpu/sampling.h) defines it: temperature > 0, top_k (<= 0: off), top_p (1: off), min_p (0:
// off), and the draw's uniform in [0, 1). tokens (device) gets the ids, or -1 for a row without a
// finite maximum. workspace: sampling_workspace_bytes(rows, cols) of device memory.
struct SampleParams {
  double temperature = 1.0;
  double top_p = 1.0;
  double min_p = 0.0;
  double uniform = 0.0;
  int top_k = 0;
};
size_t sampling_workspace_bytes(int64_t rows, int64_t cols);
cudaError_t sample_rows(int32_t* tokens, const float* logits, int64_t rows, int64_t cols, int n,
                        const SampleParams* params, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

}  // namespace tpllama::kernels
