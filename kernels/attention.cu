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
#include <mma.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

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
__device__ __forceinline__ float* partial_of(const AttentionParams& p, int64_t m, int h,
                                             int split) {
  return p.partial + ((m * p.n_heads + h) * p.splits + split) * (int64_t{p.head_dim} + 2);
}

template <typename T, typename O, typename KV>
__global__ void attention_kernel(AttentionParams p) {
  const int split = static_cast<int>(blockIdx.x % p.splits);
  const int64_t m = blockIdx.x / p.splits / p.n_heads;
  const int h = static_cast<int>(blockIdx.x / p.splits % p.n_heads);
  const int kv_h = h / (p.n_heads / p.n_kv_heads);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t q_stride = int64_t{p.n_heads} * p.head_dim,
                kv_stride = int64_t{p.n_kv_heads} * p.head_dim;
  const T* q = static_cast<const T*>(p.q) + m * q_stride + int64_t{h} * p.head_dim;
  const KV* keys = static_cast<const KV*>(p.keys) + int64_t{kv_h} * p.head_dim;
  const KV* values = static_cast<const KV*>(p.values) + int64_t{kv_h} * p.head_dim;
  const int32_t* blocks = p.block_tables + int64_t{p.seq[m]} * p.max_blocks;
  const int n_ctx = p.n_ctx[m];
  const int lo = p.window > 0 ? max(0, n_ctx - p.window) : 0;  // the first position it sees
  const int chunk = (n_ctx - lo + p.splits - 1) / p.splits;
  const int begin = lo + split * chunk, end = min(n_ctx, begin + chunk);

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
  if (p.splits >
      1) {  // an empty split leaves max -FLT_MAX and sum 0: it weighs nothing in the merge
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
  for (int s = 0; s < p.splits; ++s)
    total += partial_of(p, m, h, s)[1] * __expf(partial_of(p, m, h, s)[0] - top);
  O* out = static_cast<O*>(p.out) + (m * p.n_heads + h) * int64_t{p.head_dim};
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float v = 0;
    for (int s = 0; s < p.splits; ++s)
      v += partial_of(p, m, h, s)[2 + i] * __expf(partial_of(p, m, h, s)[0] - top);
    out[i] = from_f32<O>(v / total);
  }
}

constexpr int kQueriesPerWarp = 8;
constexpr int kRunTile = kWarps * kQueriesPerWarp;  // a run's queries per block

// Block (run tile, head): warp w takes queries [tile * kRunTile + w * kQueriesPerWarp, + 8) of the
// run, each lane PerLane of the head's dimensions (lane, lane + 32, ...).
template <typename T, typename O, typename KV, int PerLane>
__global__ void attention_runs_kernel(AttentionParams p) {
  const int run = static_cast<int>(blockIdx.x / p.tiles_per_run),
            tile = static_cast<int>(blockIdx.x % p.tiles_per_run);
  const int h = static_cast<int>(blockIdx.y);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int first = p.runs[2 * run], len = p.runs[2 * run + 1];
  const int q0 = tile * kRunTile + warp * kQueriesPerWarp;
  if (q0 >= len) return;  // the whole warp: nothing below waits for the others
  const int nq = min(kQueriesPerWarp, len - q0);
  const int64_t m0 = first + q0;
  const int kv_h = h / (p.n_heads / p.n_kv_heads);
  const int64_t q_stride = int64_t{p.n_heads} * p.head_dim,
                kv_stride = int64_t{p.n_kv_heads} * p.head_dim;
  const int32_t* blocks = p.block_tables + int64_t{p.seq[m0]} * p.max_blocks;
  const int ctx0 = p.n_ctx[m0];  // query j sees ctx0 + j positions

  // Every loop over j and i is unrolled, so these stay in registers.
  float qr[kQueriesPerWarp][PerLane], acc[kQueriesPerWarp][PerLane], mx[kQueriesPerWarp],
      sum[kQueriesPerWarp];
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
  // Query j sees [ctx0 + j - window, ctx0 + j) under a sliding window: the first query's start on.
  for (int t = p.window > 0 ? max(0, ctx0 - p.window) : 0; t < end; ++t) {
    const int64_t row = int64_t{blocks[t / p.block_size]} * p.block_size + t % p.block_size;
    float k[PerLane], v[PerLane];
#pragma unroll
    for (int i = 0; i < PerLane; ++i) {
      const int d = lane + 32 * i;
      k[i] = d < p.head_dim ? to_f32(keys[row * kv_stride + d]) : 0.0f;
      v[i] = d < p.head_dim ? to_f32(values[row * kv_stride + d]) : 0.0f;
    }
    // The queries that see position t: j < nq with t < ctx0 + j, and within the window (the same
    // for the whole warp).
#pragma unroll
    for (int j = 0; j < kQueriesPerWarp; ++j) {
      if (j >= nq || t >= ctx0 + j || (p.window > 0 && t < ctx0 + j - p.window)) continue;
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

// Runs of a bf16 cache on tensor cores (sm_80+), for head_dim 64 or 128: block (run tile, head)
// takes kTcQueries consecutive queries of the run, 16 per warp. The block stages the queries once
// and the context kTcKeys positions at a time in shared memory as bf16; each warp forms its scores
// S = Q·Kᵀ with WMMA (16×16×16, fp32 accumulation) and the output O += P·V from probabilities
// rounded to bf16 (the normaliser sums the rounded values, so each output is a convex combination
// of value rows). The queries are split into a bf16 high part and a bf16 remainder, two products
// each, so f32 queries keep about 16 bits in the scores: a peaked softmax (large scores) would
// otherwise magnify bf16's rounding of q. Two passes over the context: the first finds each row's
// maximum score, the second accumulates P·V in the WMMA accumulators, so nothing rescales them
// mid-way (their element layout is unspecified). Lanes 2r and 2r + 1 of a warp own row r of its
// scores, columns of one parity each (2k + lane % 2: two rows apart in bank, not four).
constexpr int kTcWarps = 4;
constexpr int kTcQueries = 16 * kTcWarps;
constexpr int kTcKeys = 64;

// Shared memory of the tensor-core kernel, in elements: rows padded by 8 bf16 (or 4 floats) so a
// warp's fragment loads spread over the banks; every region and fragment starts 32-byte aligned.
struct TcLayout {
  int ld, lds, ldp;  // row pitch of Q/K/V (bf16), of a warp's score scratch (f32), of its P (bf16)
  size_t q, ql, k, v, s, pr,
      bytes;  // byte offsets of the regions (ql: the queries' remainder), total
  __host__ __device__ explicit TcLayout(int hd)
      : ld(hd + 8), lds((hd > kTcKeys ? hd : kTcKeys) + 4), ldp(kTcKeys + 8) {
    q = 0;
    ql = q + sizeof(__nv_bfloat16) * kTcQueries * ld;
    k = ql + sizeof(__nv_bfloat16) * kTcQueries * ld;
    v = k + sizeof(__nv_bfloat16) * kTcKeys * ld;
    s = v + sizeof(__nv_bfloat16) * kTcKeys * ld;
    pr = s + sizeof(float) * kTcWarps * 16 * lds;
    bytes = pr + sizeof(__nv_bfloat16) * kTcWarps * 16 * ldp;
  }
};

// Positions [t0, t0 + kTcKeys) of kv head kv_h into dst (kTcKeys × ld), 8 bf16 per 16-byte load;
// positions from `end` on are zeros (their probabilities are 0, and 0 × garbage could be NaN).
template <int HD>
__device__ __forceinline__ void stage_rows(__nv_bfloat16* dst, int ld, const __nv_bfloat16* pool,
                                           int64_t kv_stride, int kv_h, const int32_t* blocks,
                                           int block_size, int t0, int end) {
  constexpr int kChunks = HD / 8;
  for (int i = threadIdx.x; i < kTcKeys * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks, t = t0 + r;
    uint4 bits = make_uint4(0, 0, 0, 0);
    if (t < end) {
      const int64_t row = int64_t{blocks[t / block_size]} * block_size + t % block_size;
      bits = *reinterpret_cast<const uint4*>(pool + row * kv_stride + int64_t{kv_h} * HD + 8 * c);
    }
    *reinterpret_cast<uint4*>(dst + r * ld + 8 * c) = bits;
  }
}

template <typename T, typename O, int HD>
__global__ void __launch_bounds__(32 * kTcWarps) attention_runs_tc_kernel(AttentionParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  constexpr int kFrags = HD / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  const TcLayout lay(HD);
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem + lay.q);
  auto* qls = reinterpret_cast<__nv_bfloat16*>(smem + lay.ql);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem + lay.k);
  auto* vs = reinterpret_cast<__nv_bfloat16*>(smem + lay.v);
  const int run = static_cast<int>(blockIdx.x / p.tiles_per_run),
            tile = static_cast<int>(blockIdx.x % p.tiles_per_run);
  const int h = static_cast<int>(blockIdx.y);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* ss = reinterpret_cast<float*>(smem + lay.s) + warp * 16 * lay.lds;  // this warp's scores
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(smem + lay.pr) + warp * 16 * lay.ldp;
  const int first = p.runs[2 * run], len = p.runs[2 * run + 1];
  const int q_begin = tile * kTcQueries;
  if (q_begin >= len) return;  // the whole block
  const int nq = min(kTcQueries, len - q_begin);
  const int64_t m0 = first + q_begin;
  const int kv_h = h / (p.n_heads / p.n_kv_heads);
  const int64_t q_stride = int64_t{p.n_heads} * HD, kv_stride = int64_t{p.n_kv_heads} * HD;
  const int32_t* blocks = p.block_tables + int64_t{p.seq[m0]} * p.max_blocks;
  const int ctx0 = p.n_ctx[m0];   // query i of the tile sees ctx0 + i positions
  const int end = ctx0 + nq - 1;  // positions some query of the tile sees
  const bool active = warp * 16 < nq;
  // This lane's row of the warp's scores and its half of the columns; a row past the run sees none.
  const int row = lane / 2, half = lane % 2, qi = warp * 16 + row;
  const int visible = qi < nq ? ctx0 + qi : 0;
  const int lo = p.window > 0 ? max(0, visible - p.window) : 0;  // the row's first position seen
  const int start = p.window > 0 ? max(0, ctx0 - p.window) / kTcKeys * kTcKeys : 0;

  for (int i = threadIdx.x; i < kTcQueries * HD; i += blockDim.x) {
    const int r = i / HD, d = i % HD;
    const float x =
        r < nq ? to_f32(static_cast<const T*>(p.q)[(m0 + r) * q_stride + int64_t{h} * HD + d])
               : 0.0f;
    const __nv_bfloat16 high = __float2bfloat16_rn(x);
    qs[r * lay.ld + d] = high;
    qls[r * lay.ld + d] = __float2bfloat16_rn(x - __bfloat162float(high));
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> qf[kFrags];
#pragma unroll
  for (int f = 0; f < kFrags; ++f)
    wmma::load_matrix_sync(qf[f], qs + warp * 16 * lay.ld + 16 * f, lay.ld);

  // S (16 × kTcKeys) of this warp against the staged keys, into ss.
  auto scores = [&] {
#pragma unroll
    for (int j = 0; j < kTcKeys / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>
            kf;  // Kᵀ: key n at column n
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> low;
        wmma::load_matrix_sync(kf, ks + 16 * j * lay.ld + 16 * f, lay.ld);
        wmma::load_matrix_sync(low, qls + warp * 16 * lay.ld + 16 * f, lay.ld);
        wmma::mma_sync(acc, qf[f], kf, acc);
        wmma::mma_sync(acc, low, kf, acc);
      }
      wmma::store_matrix_sync(ss + 16 * j, acc, lay.lds, wmma::mem_row_major);
    }
    __syncwarp();
  };

  // Pass 1: each row's largest visible score.
  float top = -FLT_MAX;
  for (int t0 = start; t0 < end; t0 += kTcKeys) {
    __syncthreads();  // the previous tile's keys are no longer read
    stage_rows<HD>(ks, lay.ld, static_cast<const __nv_bfloat16*>(p.keys), kv_stride, kv_h, blocks,
                   p.block_size, t0, end);
    __syncthreads();
    if (!active) continue;
    scores();
    for (int c = half; c < kTcKeys; c += 2)
      if (t0 + c < visible && t0 + c >= lo) top = fmaxf(top, ss[row * lay.lds + c]);
    __syncwarp();
  }
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));

  // Pass 2: P = exp(scale · (S - top)) in bf16, O += P·V, and the sum of the rounded P.
  const float scale_log2 = p.scale * 1.4426950408889634f;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> of[kFrags];
#pragma unroll
  for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(of[f], 0.0f);
  float total = 0.0f;
  for (int t0 = start; t0 < end; t0 += kTcKeys) {
    __syncthreads();
    stage_rows<HD>(ks, lay.ld, static_cast<const __nv_bfloat16*>(p.keys), kv_stride, kv_h, blocks,
                   p.block_size, t0, end);
    stage_rows<HD>(vs, lay.ld, static_cast<const __nv_bfloat16*>(p.values), kv_stride, kv_h, blocks,
                   p.block_size, t0, end);
    __syncthreads();
    if (!active) continue;
    scores();
    for (int c = half; c < kTcKeys; c += 2) {
      const float e = t0 + c < visible && t0 + c >= lo
                          ? exp2f((ss[row * lay.lds + c] - top) * scale_log2)
                          : 0.0f;
      const __nv_bfloat16 b = __float2bfloat16_rn(e);
      total += __bfloat162float(b);
      ps[row * lay.ldp + c] = b;
    }
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < kTcKeys / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> pf;
      wmma::load_matrix_sync(pf, ps + 16 * kk, lay.ldp);
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> vf;
        wmma::load_matrix_sync(vf, vs + 16 * kk * lay.ld + 16 * f, lay.ld);
        wmma::mma_sync(of[f], pf, vf, of[f]);
      }
    }
    __syncwarp();  // P and the scores are rewritten by the next tile
  }
  if (!active) return;
  total += __shfl_xor_sync(0xffffffffu, total, 1);
#pragma unroll
  for (int f = 0; f < kFrags; ++f)
    wmma::store_matrix_sync(ss + 16 * f, of[f], lay.lds, wmma::mem_row_major);
  __syncwarp();
  // Row by row, the lanes along the head: coalesced stores.
  for (int r = 0; r < 16; ++r) {
    const float row_total = __shfl_sync(0xffffffffu, total, 2 * r);
    if (warp * 16 + r >= nq) break;
    O* out = static_cast<O*>(p.out) + (m0 + warp * 16 + r) * q_stride + int64_t{h} * HD;
    for (int d = lane; d < HD; d += 32) out[d] = from_f32<O>(ss[r * lay.lds + d] / row_total);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU older than sm_80: the host should not have chosen this kernel
#endif
}

}  // namespace

// The tensor-core kernel takes a step's runs for a bf16 cache, head_dim 64 or 128, on sm_80+.
bool attention_uses_tensor_cores(const AttentionParams& p, KernelType kv_t) {
  // The GPU is sm_80+ and this build carries sm_80+ code for the kernel (not only older code or
  // PTX); a failed query (no GPU) says no and leaves no error pending.
  static const bool capable = [] {
    int device = 0, major = 0;
    cudaFuncAttributes attributes{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaFuncGetAttributes(&attributes, attention_runs_tc_kernel<float, float, 64>) !=
            cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 8 && attributes.ptxVersion >= 80;  // the architecture its body was compiled for
  }();
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return p.use_tensor_cores && capable && kv_t == KernelType::kBF16 &&
         (p.head_dim == 64 || p.head_dim == 128) && aligned(p.keys) && aligned(p.values);
}

namespace {

template <typename T, typename O, int HD>
cudaError_t launch_runs_tc(const AttentionParams& r, dim3 grid, cudaStream_t stream) {
  const TcLayout lay(HD);
  static const cudaError_t opted = cudaFuncSetAttribute(attention_runs_tc_kernel<T, O, HD>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(lay.bytes));
  if (opted != cudaSuccess) return opted;
  attention_runs_tc_kernel<T, O, HD><<<grid, 32 * kTcWarps, lay.bytes, stream>>>(r);
  return cudaGetLastError();
}

}  // namespace

int attention_splits(int64_t tokens, int n_heads, int max_ctx, int sm_count) {
  constexpr int kMinPerSplit = 256, kMaxSplits = 32;  // positions a split should at least cover
  const int64_t blocks = tokens * n_heads, wanted = 2 * int64_t{sm_count};
  if (blocks >= wanted || max_ctx <= kMinPerSplit) return 1;
  const int64_t by_occupancy = (wanted + blocks - 1) / blocks,
                by_length = (max_ctx + kMinPerSplit - 1) / kMinPerSplit;
  return static_cast<int>(std::min<int64_t>({by_occupancy, by_length, kMaxSplits}));
}

size_t attention_partial_bytes(int64_t tokens, int n_heads, int head_dim, int splits) {
  return splits > 1
             ? static_cast<size_t>(tokens * n_heads * splits * (head_dim + 2)) * sizeof(float)
             : 0;
}

cudaError_t attention(const AttentionParams& p, KernelType t, KernelType out_t, KernelType kv_t,
                      cudaStream_t stream) {
  if (p.tokens == 0) return cudaSuccess;
  if (p.head_dim > kMaxHeadDim || p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0 ||
      p.splits < 1 || (p.splits > 1 && p.partial == nullptr))
    return cudaErrorInvalidValue;
  if (p.n_runs > 0 && p.max_run > 1 &&
      attention_uses_tensor_cores(p, kv_t)) {  // prefill in the step, on tensor cores
    AttentionParams r = p;
    r.tiles_per_run = (p.max_run + kTcQueries - 1) / kTcQueries;
    const dim3 grid(static_cast<unsigned>(int64_t{p.n_runs} * r.tiles_per_run),
                    static_cast<unsigned>(p.n_heads));
    cudaError_t status = cudaSuccess;
    TPLLAMA_DISPATCH_TYPE(t, T, TPLLAMA_DISPATCH_TYPE(out_t, O, {
                            status = p.head_dim == 64 ? launch_runs_tc<T, O, 64>(r, grid, stream)
                                                      : launch_runs_tc<T, O, 128>(r, grid, stream);
                          }));
    return status;
  }
  if (p.n_runs > 0 && p.max_run > 1) {  // prefill in the step: the run kernel takes every token
    AttentionParams r = p;
    r.tiles_per_run = (p.max_run + kRunTile - 1) / kRunTile;
    const dim3 grid(static_cast<unsigned>(int64_t{p.n_runs} * r.tiles_per_run),
                    static_cast<unsigned>(p.n_heads));
    TPLLAMA_DISPATCH_TYPE(t, T, TPLLAMA_DISPATCH_TYPE(out_t, O, TPLLAMA_DISPATCH_TYPE(kv_t, KV, {
                                                        if (p.head_dim <= 128)
                                                          attention_runs_kernel<T, O, KV, 4>
                                                              <<<grid, 32 * kWarps, 0, stream>>>(r);
                                                        else
                                                          attention_runs_kernel<T, O, KV, 8>
                                                              <<<grid, 32 * kWarps, 0, stream>>>(r);
                                                      })));
    return cudaGetLastError();
  }
  const unsigned blocks = static_cast<unsigned>(p.tokens * p.n_heads * p.splits);
  TPLLAMA_DISPATCH_TYPE(t, T, TPLLAMA_DISPATCH_TYPE(out_t, O, TPLLAMA_DISPATCH_TYPE(kv_t, KV, {
                                                      attention_kernel<T, O, KV>
                                                          <<<blocks, 32 * kWarps, 0, stream>>>(p);
                                                    })));
  if (p.splits > 1) {
    const unsigned merges = static_cast<unsigned>(p.tokens * p.n_heads);
    TPLLAMA_DISPATCH_TYPE(out_t, O, merge_splits_kernel<O><<<merges, 128, 0, stream>>>(p));
  }
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
