// The CPU attention's AVX-512 kernels for tokens attending one at a time or two of a sequence at
// once: 16 positions' scores per combined lane reduction, a vectorised softmax, and the weighted
// sum of values, each row fetched ahead (the portable kernel in attention.cpp is their reference).
#include "ops/cpu/avx512.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/attention_kernels.h"
#include "ops/cpu/gemm.h"

namespace tpllama::ops::cpu {

namespace {

using namespace avx512;

// scores[t] = scale · q·k_t for t in [0, n), 16 positions at a time; rows[t]: position t's key.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void scores_avx512(float* scores, const float* q,
                                                      const KV* const* rows, int n, float scale) {
  __m512 qv[kChunks];
  for (int c = 0; c < kChunks; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  for (int t0 = 0; t0 < n; t0 += 16) {
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) {
      // The next 16 positions' rows, requested now (prefetch_row says why).
      if (t0 + 16 + j < n)
        prefetch_row(rows[t0 + 16 + j], kChunks * 16 * static_cast<int>(sizeof(KV)));
      const KV* k = rows[std::min(t0 + j, n - 1)];  // past the end: a repeat, not stored
      acc[j] = _mm512_mul_ps(qv[0], load16(k));
      for (int c = 1; c < kChunks; ++c) acc[j] = _mm512_fmadd_ps(qv[c], load16(k + 16 * c), acc[j]);
    }
    _mm512_mask_storeu_ps(scores + t0, lanes(n - t0),
                          _mm512_mul_ps(sum_lanes16(acc), _mm512_set1_ps(scale)));
  }
}

// w.keys / w.values [0, n - begin) = the key and value rows of kv head kv_head at positions
// [begin, n): looked up once per item, shared by its query heads.
template <typename KV>
void look_up_rows(const KvView& v, int begin, int n, const AttentionShape& s, int kv_head,
                  AttendScratch& w) {
  for_each_row<KV>(v, begin, n, s, kv_head, [&w, begin](int64_t t, const KV* key, const KV* value) {
    w.keys[static_cast<size_t>(t - begin)] = key;
    w.values[static_cast<size_t>(t - begin)] = value;
  });
}

// o (+)= Σ_t p[t] · v_t over t in [0, n), rows[t]: position t's value; adds to o unless `first`.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void weighted_sum_add_avx512(float* o, const float* p,
                                                                const KV* const* rows, int n,
                                                                bool first) {
  __m512 a[kChunks];
  for (int c = 0; c < kChunks; ++c)
    a[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o + 16 * c);
  constexpr int kAhead = 8;  // positions whose rows are requested ahead (as in scores_avx512)
  for (int t = 0; t < n; ++t) {
    if (t + kAhead < n) prefetch_row(rows[t + kAhead], kChunks * 16 * static_cast<int>(sizeof(KV)));
    const __m512 pt = _mm512_set1_ps(p[t]);
    for (int c = 0; c < kChunks; ++c) a[c] = _mm512_fmadd_ps(pt, load16(rows[t] + 16 * c), a[c]);
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(o + 16 * c, a[c]);
}

// Positions a tile of the grouped kernel: its keys (or values) stay in L1 while every query head
// of the kv head reads them (64 rows of 128 f32 dimensions: 32 KiB).
constexpr int kGroupTile = 64;

// One token's attention for the query heads of one kv head with AVX-512 (head_dim 16 · kChunks):
// the rows of the context looked up once; then, a tile of positions at a time, each query head's
// scores (the tile's keys read from memory once for the whole group, not once a head); a softmax
// per head; and the weighted sums, a tile of values at a time, likewise. Each head's numbers do
// not depend on how many heads share its kv head (TP layouts give the same bits).
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void attend_avx512(float* o, const float* q, const KvView& v,
                                                      const AttentionShape& s, int kv_head,
                                                      AttendScratch& w) {
  const int hd = 16 * kChunks, group = s.n_heads / s.n_kv_heads, first = first_seen(v, s),
            n = v.n_ctx - first;
  const int stride = (n + 15) / 16 * 16;  // one head's scores in w.scores
  look_up_rows<KV>(v, first, v.n_ctx, s, kv_head, w);
  const auto* keys = reinterpret_cast<const KV* const*>(w.keys.data());
  const auto* values = reinterpret_cast<const KV* const*>(w.values.data());
  const int h0 = kv_head * group;
  for (int t0 = 0; t0 < n; t0 += kGroupTile) {
    const int tn = std::min(kGroupTile, n - t0);
    for (int h = 0; h < group; ++h)
      scores_avx512<kChunks>(w.scores.data() + h * stride + t0, q + (h0 + h) * hd, keys + t0, tn,
                             s.scale);
  }
  for (int h = 0; h < group; ++h) softmax_avx512(w.scores.data() + h * stride, n);
  for (int t0 = 0; t0 < n; t0 += kGroupTile) {
    const int tn = std::min(kGroupTile, n - t0);
    for (int h = 0; h < group; ++h)
      weighted_sum_add_avx512<kChunks>(o + (h0 + h) * hd, w.scores.data() + h * stride + t0,
                                       values + t0, tn, t0 == 0);
  }
}

// The AVX-512 attention kernels take heads of 16 to 128 elements in steps of 16.
bool avx512_head_dim(int head_dim) {
  return head_dim % 16 == 0 && head_dim >= 16 && head_dim <= 128 && avx512_kernels();
}

// Two tokens of one sequence (a prefill chunk) at once: each key and value row is read once for
// both, halving what a kv head's items pull from L2. scores_pair: s0[t] = scale · q0·k_t and
// s1[t] = scale · q1·k_t for t in [0, n), 8 positions of both tokens per combined lane reduction
// (written 8 at a time: the arrays are padded).
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void scores_pair_avx512(float* s0, float* s1, const float* q0,
                                                           const float* q1, const KV* const* rows,
                                                           int n, float scale) {
  for (int t0 = 0; t0 < n; t0 += 8) {
    __m512 acc[16];
    for (int j = 0; j < 8; ++j) {
      if (t0 + 16 + j < n)  // 16 positions ahead, as scores_avx512
        prefetch_row(rows[t0 + 16 + j], kChunks * 16 * static_cast<int>(sizeof(KV)));
      const KV* k = rows[std::min(t0 + j, n - 1)];  // past the end: a repeat, not used
      __m512 kc = load16(k);
      acc[j] = _mm512_mul_ps(_mm512_loadu_ps(q0), kc);
      acc[8 + j] = _mm512_mul_ps(_mm512_loadu_ps(q1), kc);
      for (int c = 1; c < kChunks; ++c) {
        kc = load16(k + 16 * c);
        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 16 * c), kc, acc[j]);
        acc[8 + j] = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + 16 * c), kc, acc[8 + j]);
      }
    }
    const __m512 sums = _mm512_mul_ps(sum_lanes16(acc),
                                      _mm512_set1_ps(scale));  // lanes 0-7: token 0; 8-15: token 1
    _mm256_storeu_ps(s0 + t0, _mm512_castps512_ps256(sums));
    _mm256_storeu_ps(s1 + t0, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1)));
  }
}

// o0 = Σ_{t < n0} p0[t] · v_t and o1 = Σ_{t < n1} p1[t] · v_t, each row read once for both.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void weighted_sum_pair_avx512(float* o0, float* o1,
                                                                 const float* p0, const float* p1,
                                                                 const KV* const* rows, int n0,
                                                                 int n1) {
  __m512 a[kChunks], b[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = b[c] = _mm512_setzero_ps();
  const int both = std::min(n0, n1), n = std::max(n0, n1);
  constexpr int kAhead = 8;
  for (int t = 0; t < n; ++t) {
    if (t + kAhead < n) prefetch_row(rows[t + kAhead], kChunks * 16 * static_cast<int>(sizeof(KV)));
    if (t < both) {
      const __m512 pa = _mm512_set1_ps(p0[t]), pb = _mm512_set1_ps(p1[t]);
      for (int c = 0; c < kChunks; ++c) {
        const __m512 v = load16(rows[t] + 16 * c);
        a[c] = _mm512_fmadd_ps(pa, v, a[c]);
        b[c] = _mm512_fmadd_ps(pb, v, b[c]);
      }
    } else if (n0 > n1) {
      for (int c = 0; c < kChunks; ++c)
        a[c] = _mm512_fmadd_ps(_mm512_set1_ps(p0[t]), load16(rows[t] + 16 * c), a[c]);
    } else {
      for (int c = 0; c < kChunks; ++c)
        b[c] = _mm512_fmadd_ps(_mm512_set1_ps(p1[t]), load16(rows[t] + 16 * c), b[c]);
    }
  }
  for (int c = 0; c < kChunks; ++c) {
    _mm512_storeu_ps(o0 + 16 * c, a[c]);
    _mm512_storeu_ps(o1 + 16 * c, b[c]);
  }
}

// Two tokens of one sequence (the same block table; any contexts n0, n1, both from position 0: no
// sliding window) for the query heads of one kv head.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void attend_pair_avx512(float* o0, float* o1, const float* q0,
                                                           const float* q1, const KvView& v0,
                                                           const KvView& v1,
                                                           const AttentionShape& s, int kv_head,
                                                           AttendScratch& w) {
  const int hd = 16 * kChunks, group = s.n_heads / s.n_kv_heads, n = std::max(v0.n_ctx, v1.n_ctx);
  look_up_rows<KV>(v0, 0, n, s, kv_head, w);
  const auto* keys = reinterpret_cast<const KV* const*>(w.keys.data());
  const auto* values = reinterpret_cast<const KV* const*>(w.values.data());
  for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    scores_pair_avx512<kChunks>(w.scores.data(), w.scores2.data(), q0 + h * hd, q1 + h * hd, keys,
                                n, s.scale);
    softmax_avx512(w.scores.data(), v0.n_ctx);
    softmax_avx512(w.scores2.data(), v1.n_ctx);
    weighted_sum_pair_avx512<kChunks>(o0 + h * hd, o1 + h * hd, w.scores.data(), w.scores2.data(),
                                      values, v0.n_ctx, v1.n_ctx);
  }
}

}  // namespace

AttendPairFn attend_pair_kernel(int head_dim, DType kv) {
  static constexpr AttendPairFn f32[] = {
      &attend_pair_avx512<1, float>, &attend_pair_avx512<2, float>, &attend_pair_avx512<3, float>,
      &attend_pair_avx512<4, float>, &attend_pair_avx512<5, float>, &attend_pair_avx512<6, float>,
      &attend_pair_avx512<7, float>, &attend_pair_avx512<8, float>};
  static constexpr AttendPairFn bf16[] = {
      &attend_pair_avx512<1, uint16_t>, &attend_pair_avx512<2, uint16_t>,
      &attend_pair_avx512<3, uint16_t>, &attend_pair_avx512<4, uint16_t>,
      &attend_pair_avx512<5, uint16_t>, &attend_pair_avx512<6, uint16_t>,
      &attend_pair_avx512<7, uint16_t>, &attend_pair_avx512<8, uint16_t>};
  if (!avx512_head_dim(head_dim)) return nullptr;
  return (kv == DType::kBF16 ? bf16 : f32)[head_dim / 16 - 1];
}

AttendFn attend_kernel(int head_dim, DType kv) {
  static constexpr AttendFn f32[] = {&attend_avx512<1, float>, &attend_avx512<2, float>,
                                     &attend_avx512<3, float>, &attend_avx512<4, float>,
                                     &attend_avx512<5, float>, &attend_avx512<6, float>,
                                     &attend_avx512<7, float>, &attend_avx512<8, float>};
  static constexpr AttendFn bf16[] = {&attend_avx512<1, uint16_t>, &attend_avx512<2, uint16_t>,
                                      &attend_avx512<3, uint16_t>, &attend_avx512<4, uint16_t>,
                                      &attend_avx512<5, uint16_t>, &attend_avx512<6, uint16_t>,
                                      &attend_avx512<7, uint16_t>, &attend_avx512<8, uint16_t>};
  if (!avx512_head_dim(head_dim)) return nullptr;
  return (kv == DType::kBF16 ? bf16 : f32)[head_dim / 16 - 1];
}

}  // namespace tpllama::ops::cpu
