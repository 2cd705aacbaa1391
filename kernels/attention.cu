// Paged attention with an online softmax: one block per (token, query head, split); its warps share
// the split's stretch of the token's context (positions warp, warp + kWarps, ...), each keeping a
// running max, sum and weighted value sum, merged at the end. No score matrix is materialised; the
// same kernel serves decode (one token per sequence) and causal prefill (each token with its own
// n_ctx). When tokens × heads are too few to fill the GPU (decode of a few long sequences) the
// context is split along the sequence: each split writes its partial max, sum and accumulator,
// and a second kernel merges them (flash-decoding).
//
// Prefill chunks go to a second kernel over runs (consecutive tokens of one sequence at
// consecutive positions): each warp takes kQueriesPerWarp of a run's queries through the context
// together, so each key and value row is read once per warp (and from L1 by the block's other
// warps) instead of once per query; query j of the run sees one position more than query j - 1.
#include <algorithm>
#include <cfloat>

#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

using detail::from_f32;
using detail::to_f32;
using detail::warp_sum;

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;

// Partial results of one (token, head, split): max, sum, then head_dim accumulator values.
__device__ __forceinline__ float* partial_of(const AttentionParams& p, int64_t m, int h, int split) {
  return p.partial + ((m * p.n_heads + h) * p.splits + split) * (int64_t{p.head_dim} + 2);
}

template <typename T, typename O, typename KV>
__global__ void attention_kernel(AttentionParams p) {
  const int split = static_cast<int>(blockIdx.x % p.splits);
  const int64_t m = blockIdx.x / p.splits / p.n_heads;
  const int h = static_cast<int>(blockIdx.x / p.splits % p.n_heads);
  const int kv_h = h / (p.n_heads / p.n_kv_heads);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t q_stride = int64_t{p.n_heads} * p.head_dim, kv_stride = int64_t{p.n_kv_heads} * p.head_dim;
  const T* q = static_cast<const T*>(p.q) + m * q_stride + int64_t{h} * p.head_dim;
  const KV* keys = static_cast<const KV*>(p.keys) + int64_t{kv_h} * p.head_dim;
  const KV* values = static_cast<const KV*>(p.values) + int64_t{kv_h} * p.head_dim;
  const int32_t* blocks = p.block_tables + int64_t{p.seq[m]} * p.max_blocks;
  const int n_ctx = p.n_ctx[m];
  const int chunk = (n_ctx + p.splits - 1) / p.splits;
  const int begin = split * chunk, end = min(n_ctx, begin + chunk);

  float qr[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    qr[j] = i < p.head_dim ? to_f32(q[i]) : 0.0f;
    acc[j] = 0.0f;
  }
  float running_max = -FLT_MAX, running_sum = 0.0f;
  for (int t = begin + warp; t < end; t += kWarps) {
    const int64_t row = int64_t{blocks[t / p.block_size]} * p.block_size + t % p.block_size;
    const KV* k = keys + row * kv_stride;
    float dot = 0;
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < p.head_dim) dot += qr[j] * to_f32(k[i]);
    }
    const float score = warp_sum(dot) * p.scale;
    const float new_max = fmaxf(running_max, score);
    const float rescale = __expf(running_max - new_max), weight = __expf(score - new_max);
    running_sum = running_sum * rescale + weight;
    const KV* v = values + row * kv_stride;
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane + 32 * j;
      acc[j] = acc[j] * rescale + (i < p.head_dim ? weight * to_f32(v[i]) : 0.0f);
    }
    running_max = new_max;
  }

  // Merge the warps: rescale each to the block's max.
  __shared__ float max_of[kWarps], sum_of[kWarps];
  __shared__ float acc_of[kWarps][kMaxHeadDim];
  if (lane == 0) {
    max_of[warp] = running_max;
    sum_of[warp] = running_sum;
  }
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < p.head_dim) acc_of[warp][i] = acc[j];
  }
  __syncthreads();
  float block_max = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, max_of[w]);
  float total = 0;
  for (int w = 0; w < kWarps; ++w) total += sum_of[w] * __expf(max_of[w] - block_max);
  if (p.splits > 1) {  // an empty split leaves max -FLT_MAX and sum 0: it weighs nothing in the merge
    float* part = partial_of(p, m, h, split);
    if (threadIdx.x == 0) {
      part[0] = block_max;
      part[1] = total;
    }
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
      float v = 0;
      for (int w = 0; w < kWarps; ++w) v += acc_of[w][i] * __expf(max_of[w] - block_max);
      part[2 + i] = v;
    }
    return;
  }
  O* out = static_cast<O*>(p.out) + m * q_stride + int64_t{h} * p.head_dim;
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float v = 0;
    for (int w = 0; w < kWarps; ++w) v += acc_of[w][i] * __expf(max_of[w] - block_max);
    out[i] = from_f32<O>(v / total);
  }
}

// One block per (token, head): the splits' partials rescaled to their common max and summed.
template <typename O>
__global__ void merge_splits_kernel(AttentionParams p) {
  const int64_t m = blockIdx.x / p.n_heads;
  const int h = static_cast<int>(blockIdx.x % p.n_heads);
  float top = -FLT_MAX;
  for (int s = 0; s < p.splits; ++s) top = fmaxf(top, partial_of(p, m, h, s)[0]);
  float total = 0;
  for (int s = 0; s < p.splits; ++s) total += partial_of(p, m, h, s)[1] * __expf(partial_of(p, m, h, s)[0] - top);
  O* out = static_cast<O*>(p.out) + (m * p.n_heads + h) * int64_t{p.head_dim};
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float v = 0;
    for (int s = 0; s < p.splits; ++s) v += partial_of(p, m, h, s)[2 + i] * __expf(partial_of(p, m, h, s)[0] - top);
    out[i] = from_f32<O>(v / total);
  }
}

constexpr int kQueriesPerWarp = 8;
constexpr int kRunTile = kWarps * kQueriesPerWarp;  // a run's queries per block

// Block (run tile, head): warp w takes queries [tile * kRunTile + w * kQueriesPerWarp, + 8) of the
// run, each lane PerLane of the head's dimensions (lane, lane + 32, ...).
template <typename T, typename O, typename KV, int PerLane>
__global__ void attention_runs_kernel(AttentionParams p) {
  const int run = static_cast<int>(blockIdx.x / p.tiles_per_run), tile = static_cast<int>(blockIdx.x % p.tiles_per_run);
  const int h = static_cast<int>(blockIdx.y);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int first = p.runs[2 * run], len = p.runs[2 * run + 1];
  const int q0 = tile * kRunTile + warp * kQueriesPerWarp;
  if (q0 >= len) return;  // the whole warp: nothing below waits for the others
  const int nq = min(kQueriesPerWarp, len - q0);
  const int64_t m0 = first + q0;
  const int kv_h = h / (p.n_heads / p.n_kv_heads);
  const int64_t q_stride = int64_t{p.n_heads} * p.head_dim, kv_stride = int64_t{p.n_kv_heads} * p.head_dim;
  const int32_t* blocks = p.block_tables + int64_t{p.seq[m0]} * p.max_blocks;
  const int ctx0 = p.n_ctx[m0];  // query j sees ctx0 + j positions

  // Every loop over j and i is unrolled, so these stay in registers.
  float qr[kQueriesPerWarp][PerLane], acc[kQueriesPerWarp][PerLane], mx[kQueriesPerWarp], sum[kQueriesPerWarp];
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    const T* q = static_cast<const T*>(p.q) + (m0 + j) * q_stride + int64_t{h} * p.head_dim;
#pragma unroll
    for (int i = 0; i < PerLane; ++i) {
      const int d = lane + 32 * i;
      qr[j][i] = j < nq && d < p.head_dim ? to_f32(q[d]) : 0.0f;
      acc[j][i] = 0.0f;
    }
    mx[j] = -FLT_MAX;
    sum[j] = 0.0f;
  }
  const KV* keys = static_cast<const KV*>(p.keys) + int64_t{kv_h} * p.head_dim;
  const KV* values = static_cast<const KV*>(p.values) + int64_t{kv_h} * p.head_dim;
  const int end = ctx0 + nq - 1;
  for (int t = 0; t < end; ++t) {
    const int64_t row = int64_t{blocks[t / p.block_size]} * p.block_size + t % p.block_size;
    float k[PerLane], v[PerLane];
#pragma unroll
    for (int i = 0; i < PerLane; ++i) {
      const int d = lane + 32 * i;
      k[i] = d < p.head_dim ? to_f32(keys[row * kv_stride + d]) : 0.0f;
      v[i] = d < p.head_dim ? to_f32(values[row * kv_stride + d]) : 0.0f;
    }
    // The queries that see position t: j < nq with t < ctx0 + j (the same for the whole warp).
#pragma unroll
    for (int j = 0; j < kQueriesPerWarp; ++j) {
      if (j >= nq || t >= ctx0 + j) continue;
      float dot = 0;
#pragma unroll
      for (int i = 0; i < PerLane; ++i) dot += qr[j][i] * k[i];
      const float score = warp_sum(dot) * p.scale;
      const float new_max = fmaxf(mx[j], score);
      const float rescale = __expf(mx[j] - new_max), weight = __expf(score - new_max);
      sum[j] = sum[j] * rescale + weight;
#pragma unroll
      for (int i = 0; i < PerLane; ++i) acc[j][i] = acc[j][i] * rescale + weight * v[i];
      mx[j] = new_max;
    }
  }
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    if (j >= nq) continue;
    O* out = static_cast<O*>(p.out) + (m0 + j) * q_stride + int64_t{h} * p.head_dim;
#pragma unroll
    for (int i = 0; i < PerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < p.head_dim) out[d] = from_f32<O>(acc[j][i] / sum[j]);
    }
  }
}

}  // namespace

int attention_splits(int64_t tokens, int n_heads, int max_ctx, int sm_count) {
  constexpr int kMinPerSplit = 256, kMaxSplits = 32;  // positions a split should at least cover
  const int64_t blocks = tokens * n_heads, wanted = 2 * int64_t{sm_count};
  if (blocks >= wanted || max_ctx <= kMinPerSplit) return 1;
  const int64_t by_occupancy = (wanted + blocks - 1) / blocks, by_length = (max_ctx + kMinPerSplit - 1) / kMinPerSplit;
  return static_cast<int>(std::min<int64_t>({by_occupancy, by_length, kMaxSplits}));
}

size_t attention_partial_bytes(int64_t tokens, int n_heads, int head_dim, int splits) {
  return splits > 1 ? static_cast<size_t>(tokens * n_heads * splits * (head_dim + 2)) * sizeof(float) : 0;
}

cudaError_t attention(const AttentionParams& p, KernelType t, KernelType out_t, KernelType kv_t, cudaStream_t stream) {
  if (p.tokens == 0) return cudaSuccess;
  if (p.head_dim > kMaxHeadDim || p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0 || p.splits < 1 ||
      (p.splits > 1 && p.partial == nullptr))
    return cudaErrorInvalidValue;
  if (p.n_runs > 0 && p.max_run > 1) {  // prefill in the step: the run kernel takes every token
    AttentionParams r = p;
    r.tiles_per_run = (p.max_run + kRunTile - 1) / kRunTile;
    const dim3 grid(static_cast<unsigned>(int64_t{p.n_runs} * r.tiles_per_run), static_cast<unsigned>(p.n_heads));
    TPLLAMA_DISPATCH_TYPE(t, T, TPLLAMA_DISPATCH_TYPE(out_t, O, TPLLAMA_DISPATCH_TYPE(kv_t, KV, {
      if (p.head_dim <= 128)
        attention_runs_kernel<T, O, KV, 4><<<grid, 32 * kWarps, 0, stream>>>(r);
      else
        attention_runs_kernel<T, O, KV, 8><<<grid, 32 * kWarps, 0, stream>>>(r);
    })));
    return cudaGetLastError();
  }
  const unsigned blocks = static_cast<unsigned>(p.tokens * p.n_heads * p.splits);
  TPLLAMA_DISPATCH_TYPE(t, T, TPLLAMA_DISPATCH_TYPE(out_t, O, TPLLAMA_DISPATCH_TYPE(kv_t, KV, {
    attention_kernel<T, O, KV><<<blocks, 32 * kWarps, 0, stream>>>(p);
  })));
  if (p.splits > 1) {
    const unsigned merges = static_cast<unsigned>(p.tokens * p.n_heads);
    TPLLAMA_DISPATCH_TYPE(out_t, O, merge_splits_kernel<O><<<merges, 128, 0, stream>>>(p));
  }
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
