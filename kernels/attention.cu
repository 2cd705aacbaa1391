// Paged attention with an online softmax: one block per (token, query head); its warps split the
// token's context (positions warp, warp + kWarps, ...), each keeping a running max, sum and
// weighted value sum, merged at the end. No score matrix is materialised; the same kernel serves
// decode (one token per sequence) and causal prefill (each token with its own n_ctx).
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

template <typename T>
__global__ void attention_kernel(AttentionParams p) {
  const int64_t m = blockIdx.x / p.n_heads;
  const int h = static_cast<int>(blockIdx.x % p.n_heads);
  const int kv_h = h / (p.n_heads / p.n_kv_heads);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t q_stride = int64_t{p.n_heads} * p.head_dim, kv_stride = int64_t{p.n_kv_heads} * p.head_dim;
  const T* q = static_cast<const T*>(p.q) + m * q_stride + int64_t{h} * p.head_dim;
  const T* keys = static_cast<const T*>(p.keys) + int64_t{kv_h} * p.head_dim;
  const T* values = static_cast<const T*>(p.values) + int64_t{kv_h} * p.head_dim;
  const int32_t* blocks = p.block_tables + m * p.max_blocks;
  const int n_ctx = p.n_ctx[m];

  float qr[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    qr[j] = i < p.head_dim ? to_f32(q[i]) : 0.0f;
    acc[j] = 0.0f;
  }
  float running_max = -FLT_MAX, running_sum = 0.0f;
  for (int t = warp; t < n_ctx; t += kWarps) {
    const int64_t row = int64_t{blocks[t / p.block_size]} * p.block_size + t % p.block_size;
    const T* k = keys + row * kv_stride;
    float dot = 0;
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < p.head_dim) dot += qr[j] * to_f32(k[i]);
    }
    const float score = warp_sum(dot) * p.scale;
    const float new_max = fmaxf(running_max, score);
    const float rescale = __expf(running_max - new_max), weight = __expf(score - new_max);
    running_sum = running_sum * rescale + weight;
    const T* v = values + row * kv_stride;
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
  T* out = static_cast<T*>(p.out) + m * q_stride + int64_t{h} * p.head_dim;
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float v = 0;
    for (int w = 0; w < kWarps; ++w) v += acc_of[w][i] * __expf(max_of[w] - block_max);
    out[i] = from_f32<T>(v / total);
  }
}

}  // namespace

cudaError_t attention(const AttentionParams& p, KernelType t, cudaStream_t stream) {
  if (p.tokens == 0) return cudaSuccess;
  if (p.head_dim > kMaxHeadDim || p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0) return cudaErrorInvalidValue;
  const unsigned blocks = static_cast<unsigned>(p.tokens * p.n_heads);
  TPLLAMA_DISPATCH_TYPE(t, T, attention_kernel<T><<<blocks, 32 * kWarps, 0, stream>>>(p));
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
