// The CPU attention's kernels, for ops/cpu/attention*.cpp only: the AVX-512 ones (one token or two
// of a sequence, per kv head), prefill runs' register tiles, and what they share.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "ops/attention.h"
#include "ops/cpu/attention.h"

namespace tpllama::ops::cpu {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 18;
// Runs of at least this many consecutive tokens of one sequence attend together (attend_run).
constexpr int kRunTokens = 32;

// Per-thread scratch of one work item: the key and value row of each position, the scores.
struct AttendScratch {
  std::vector<const void*> keys, values;
  std::vector<float> scores, scores2;  // scores2: the second token of a pair
  // Room for `rows` rows and the scores, grown where smaller (never shrunk).
  void fit(size_t rows, size_t n_scores, size_t n_scores2) {
    if (keys.size() < rows) {
      keys.resize(rows);
      values.resize(rows);
    }
    if (scores.size() < n_scores) scores.resize(n_scores);
    if (scores2.size() < n_scores2) scores2.resize(n_scores2);
  }
};

// KV elements as f32 (the portable kernel and the runs' packing).
inline float as_f32(float v) {
  return v;
}
inline float as_f32(uint16_t v) {
  return bf16_to_f32(v);
}

// fn(t, key, value) for positions t in [begin, n) of the sequence v's table names, with the key
// and value rows of kv head kv_head. Block by block: one table read and one multiply a block, an
// add a position (no division).
template <typename KV, typename Fn>
void for_each_row(const KvView& v, int64_t begin, int64_t n, const AttentionShape& s, int kv_head,
                  Fn&& fn) {
  const int bs = s.block_size;
  const int64_t stride = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
  const int64_t off = static_cast<int64_t>(kv_head) * s.head_dim;
  for (int64_t t0 = begin / bs * bs; t0 < n; t0 += bs) {
    const int64_t t = std::max(t0, begin);
    const KV* key = static_cast<const KV*>(v.keys) +
                    (static_cast<int64_t>(v.blocks[t0 / bs]) * bs + (t - t0)) * stride + off;
    const KV* value = static_cast<const KV*>(v.values) + (key - static_cast<const KV*>(v.keys));
    for (int64_t u = t; u < std::min(n, t0 + bs); ++u, key += stride, value += stride)
      fn(u, key, value);
  }
}

// AttendFn(o, q, view, shape, kv_begin, kv_end, scratch): one token's query heads of kv heads
// [kv_begin, kv_end); AttendPairFn(..., kv_head, scratch): two tokens' of one kv head.
using AttendFn = void (*)(float*, const float*, const KvView&, const AttentionShape&, int, int,
                          AttendScratch&);
using AttendPairFn = void (*)(float*, float*, const float*, const float*, const KvView&,
                              const KvView&, const AttentionShape&, int, AttendScratch&);
// The AVX-512 kernel for a head_dim and KV dtype (one token; two tokens of one sequence), or null
// where there is none (no AVX-512, or a head_dim not a multiple of 16 or over 128).
AttendFn attend_kernel(int head_dim, DType kv);
AttendPairFn attend_pair_kernel(int head_dim, DType kv);

// Attention of a run of T tokens of one sequence at consecutive positions (register tiles over
// packed keys and values, attention_run.cpp); `first` is its first token's view, q and out its
// first row.
void attend_run(float* out, const float* q, const KvView& first, int64_t T,
                const AttentionShape& s);

}  // namespace tpllama::ops::cpu
