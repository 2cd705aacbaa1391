// The CPU attention's AVX-512 kernels for tokens attending one at a time or two of a sequence at
// once: 16 positions' scores per combined lane reduction, a vectorised softmax, and the weighted
// sum of values, each row fetched ahead (the portable kernel in attention.cpp is their reference).
#include "ops/cpu/avx512.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cpu/attention_kernels.h"
#include "ops/cpu/gemm.h"

namespace tpllama::ops::cpu {

namespace {

using namespace avx512;

// A row of head_dim = 16 · kChunks cache elements in kRegs registers. f32: kChunks vectors in
// order. bf16: each 32 elements (16 where kChunks is odd, at the end) one load of 32-bit pairs,
// split by a shift and a mask into the even elements and the odd (load), where widening 16
// at a time took a shuffle each (decode attention over a bf16 cache was bound by them: 0.315 ms
// over an 8 MB cache in L3, where the f32 cache of twice the bytes took 0.346). A query or a sum
// meets the rows in their order: load_f32 puts an f32 vector of head_dim elements (q, an output)
// in it, store_f32 puts one back.
template <int kChunks, typename KV>
struct RowRegs;

template <int kChunks>
struct RowRegs<kChunks, float> {
  static constexpr int kRegs = kChunks;
  __attribute__((target("avx512f"))) static void load(const float* r, __m512 (&v)[kRegs]) {
    for (int c = 0; c < kChunks; ++c) v[c] = _mm512_loadu_ps(r + 16 * c);
  }
  __attribute__((target("avx512f"))) static void load_f32(const float* x, __m512 (&v)[kRegs]) {
    load(x, v);
  }
  __attribute__((target("avx512f"))) static void store_f32(float* x, const __m512 (&v)[kRegs]) {
    for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(x + 16 * c, v[c]);
  }
};

template <int kChunks>
struct RowRegs<kChunks, uint16_t> {
  static constexpr int kPairs = (kChunks + 1) / 2;  // 32-element pieces; the last may be 16
  static constexpr int kRegs = 2 * kPairs;          // even, odd of each piece
  static constexpr __mmask16 piece_lanes(int p) {   // its 32-bit pairs
    return 2 * p + 1 < kChunks ? __mmask16(0xFFFF) : __mmask16(0x00FF);
  }
  __attribute__((target("avx512f"))) static void load(const uint16_t* r, __m512 (&v)[kRegs]) {
    for (int p = 0; p < kPairs; ++p) {
      const __m512i pairs = piece_lanes(p) == 0xFFFF
                                ? _mm512_loadu_si512(r + 32 * p)
                                : _mm512_maskz_loadu_epi32(piece_lanes(p), r + 32 * p);
      v[2 * p] = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
      v[2 * p + 1] =
          _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int32_t(0xFFFF0000u))));
    }
  }
  // Element 2i of a piece to lane i of its even vector, 2i + 1 to lane i of its odd; and back.
  __attribute__((target("avx512f"))) static void load_f32(const float* x, __m512 (&v)[kRegs]) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int p = 0; p < kPairs; ++p) {
      const __m512 lo = _mm512_loadu_ps(x + 32 * p), hi = piece_lanes(p) == 0xFFFF
                                                              ? _mm512_loadu_ps(x + 32 * p + 16)
                                                              : _mm512_setzero_ps();
      v[2 * p] = _mm512_permutex2var_ps(lo, even, hi);
      v[2 * p + 1] = _mm512_permutex2var_ps(lo, odd, hi);
    }
  }
  __attribute__((target("avx512f"))) static void store_f32(float* x, const __m512 (&v)[kRegs]) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    for (int p = 0; p < kPairs; ++p) {
      _mm512_storeu_ps(x + 32 * p, _mm512_permutex2var_ps(v[2 * p], lo, v[2 * p + 1]));
      if (piece_lanes(p) == 0xFFFF)
        _mm512_storeu_ps(x + 32 * p + 16, _mm512_permutex2var_ps(v[2 * p], hi, v[2 * p + 1]));
    }
  }
};

// Heads a bundle of the one-token kernel: its scores, or its weighted sums, run side by side, as
// many as keep their queries (or sums) in 16 registers, up to 4.
template <int kChunks, typename KV>
constexpr int kBundleHeads = std::clamp(16 / RowRegs<kChunks, KV>::kRegs, 1, 4);

// fn.template operator()<k>() with k = heads (1 to kMax <= 4): a bundle's heads as a template
// argument.
template <int kMax, typename Fn>
void with_heads(int heads, Fn&& fn) {
  TPLLAMA_CHECK(heads >= 1 && heads <= kMax, "a bundle of ", heads, " heads, at most ", kMax);
  if constexpr (kMax >= 4)
    if (heads == 4) return fn.template operator()<4>();
  if constexpr (kMax >= 3)
    if (heads == 3) return fn.template operator()<3>();
  if constexpr (kMax >= 2)
    if (heads == 2) return fn.template operator()<2>();
  fn.template operator()<1>();
}

// For kHeads query heads b of one kv head: scores[b · s_step + t] = scale · q_b·k_t for t in [0,
// n), q_b = q + b · head_dim, 16 positions at a time, each key read once for them all; rows[t] +
// off: position t's key. far[t] + off for t < far_n: the rows the heads read a tile later, asked
// into L2 meanwhile. A head's sums do not depend on its neighbours.
template <int kChunks, int kHeads, typename KV>
__attribute__((target("avx512f"))) void scores_avx512(float* scores, int64_t s_step, const float* q,
                                                      const KV* const* rows, int64_t off, int n,
                                                      float scale, const KV* const* far,
                                                      int far_n) {
  using Regs = RowRegs<kChunks, KV>;
  constexpr int kBytes = kChunks * 16 * static_cast<int>(sizeof(KV));
  __m512 qv[kHeads][Regs::kRegs];
  for (int b = 0; b < kHeads; ++b) Regs::load_f32(q + b * 16 * kChunks, qv[b]);
  for (int t0 = 0; t0 < n; t0 += 16) {
    __m512 acc[kHeads][16];
    for (int j = 0; j < 16; ++j) {
      if (t0 + j < far_n) prefetch_row_l2(far[t0 + j] + off, kBytes);
      __m512 k[Regs::kRegs];  // past the end: a repeat, not stored
      Regs::load(rows[std::min(t0 + j, n - 1)] + off, k);
      for (int b = 0; b < kHeads; ++b) {
        acc[b][j] = _mm512_mul_ps(qv[b][0], k[0]);
        for (int c = 1; c < Regs::kRegs; ++c)
          acc[b][j] = _mm512_fmadd_ps(qv[b][c], k[c], acc[b][j]);
      }
    }
    for (int b = 0; b < kHeads; ++b)
      _mm512_mask_storeu_ps(scores + b * s_step + t0, lanes(n - t0),
                            _mm512_mul_ps(sum_lanes16(acc[b]), _mm512_set1_ps(scale)));
  }
  for (int t = n; t < far_n; ++t) prefetch_row_l2(far[t] + off, kBytes);
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

// For kHeads consecutive heads b: o + b · hd (+)= Σ_t p[b · p_step + t] · v_t over t in [0, n),
// where v_t = rows[t] + off + b · off_step (off_step 0 where the heads share a kv head: kShared,
// each row read once for them all); adds to o unless `first`. Asks for far[t] + off, the rows of
// the bundle's kv heads (kv_bytes), for t < far_n into L2 meanwhile (as scores_avx512). The heads'
// sums run side by side, each in its own registers and in the order of t (a head's bits do not
// depend on its neighbours): one head's alone would wait on each multiply-add's latency.
template <int kChunks, int kHeads, bool kShared, typename KV>
__attribute__((target("avx512f"))) void weighted_sums_avx512(float* o, const float* p,
                                                             int64_t p_step, const KV* const* rows,
                                                             int64_t off, int n, bool first,
                                                             const KV* const* far, int far_n,
                                                             int kv_bytes) {
  using Regs = RowRegs<kChunks, KV>;
  constexpr int hd = 16 * kChunks;
  constexpr int64_t off_step = kShared ? 0 : hd;
  __m512 a[kHeads][Regs::kRegs];
  for (int b = 0; b < kHeads; ++b) {
    if (first)
      for (__m512& x : a[b]) x = _mm512_setzero_ps();
    else
      Regs::load_f32(o + b * hd, a[b]);
  }
  for (int t = 0; t < n; ++t) {
    if (t < far_n) prefetch_row_l2(far[t] + off, kv_bytes);
    const KV* r = rows[t] + off;
    __m512 v[Regs::kRegs];
    if constexpr (kShared) Regs::load(r, v);
    for (int b = 0; b < kHeads; ++b) {
      if constexpr (!kShared) Regs::load(r + b * off_step, v);
      const __m512 pt = _mm512_set1_ps(p[b * p_step + t]);
      for (int c = 0; c < Regs::kRegs; ++c) a[b][c] = _mm512_fmadd_ps(pt, v[c], a[b][c]);
    }
  }
  for (int t = n; t < far_n; ++t) prefetch_row_l2(far[t] + off, kv_bytes);
  for (int b = 0; b < kHeads; ++b) Regs::store_f32(o + b * hd, a[b]);
}

// The weighted sums of `heads` (<= kBundleHeads) consecutive heads, kShared or not, as one bundle.
template <int kChunks, bool kShared, typename KV>
void weighted_sums_of(int heads, float* o, const float* p, int64_t p_step, const KV* const* rows,
                      int64_t off, int n, bool first, const KV* const* far, int far_n,
                      int kv_bytes) {
  with_heads<kBundleHeads<kChunks, KV>>(heads, [&]<int kHeads>() {
    weighted_sums_avx512<kChunks, kHeads, kShared>(o, p, p_step, rows, off, n, first, far, far_n,
                                                   kv_bytes);
  });
}

// The scores of `heads` (<= kBundleHeads) consecutive query heads of one kv head as one bundle.
template <int kChunks, typename KV>
void scores_of(int heads, float* scores, int64_t s_step, const float* q, const KV* const* rows,
               int64_t off, int n, float scale, const KV* const* far, int far_n) {
  with_heads<kBundleHeads<kChunks, KV>>(heads, [&]<int kHeads>() {
    scores_avx512<kChunks, kHeads>(scores, s_step, q, rows, off, n, scale, far, far_n);
  });
}

// Positions a tile of the one-token kernel: its keys (or values) stay in L2 while every query head
// of the item's kv heads reads them, next to the next tile's, asked for meanwhile (2 x 64 rows of 8
// kv heads of 128 f32 dimensions: 512 KiB).
constexpr int kGroupTile = 64;

// One token's attention for the query heads of kv heads [kv_begin, kv_end) with AVX-512 (head_dim
// 16 · kChunks): the rows of the context looked up once; then, a tile of positions at a time, each
// query head's scores (the tile's keys read from memory once for the whole group, not once a
// head); a softmax per head; and the weighted sums, a tile of values at a time, likewise, several
// heads side by side. Memory is read a tile ahead: as the first query head of each kv head passes
// over a tile, it asks for its rows of the next tile (after the last tile of keys, the first of
// values) into L2. Each head's numbers do not depend on how many heads share its kv head or the
// item (TP layouts and thread counts give the same bits).
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void attend_avx512(float* o, const float* q, const KvView& v,
                                                      const AttentionShape& s, int kv_begin,
                                                      int kv_end, AttendScratch& w) {
  const int hd = 16 * kChunks, group = s.n_heads / s.n_kv_heads, first = first_seen(v, s),
            n = v.n_ctx - first;
  const int stride = (n + 15) / 16 * 16;  // one head's scores in w.scores
  look_up_rows<KV>(v, first, v.n_ctx, s, 0, w);
  const auto* keys = reinterpret_cast<const KV* const*>(w.keys.data());
  const auto* values = reinterpret_cast<const KV* const*>(w.values.data());
  const int heads = (kv_end - kv_begin) * group, h0 = kv_begin * group;
  auto scores_row = [&](int h) { return w.scores.data() + (h - h0) * stride; };
  auto off_of = [&](int h) { return int64_t{h / group} * hd; };
  constexpr int kBytes = kChunks * 16 * static_cast<int>(sizeof(KV));
  for (int t = 0; t < std::min(kGroupTile, n); ++t)  // the first tile of keys, every kv head's
    prefetch_row_l2(keys[t] + off_of(h0), (kv_end - kv_begin) * kBytes);
  // What head h asks for as it passes over the tile at t0: the next tile of its pass, or after the
  // last tile of keys the first of values; only the first query head of a kv head asks.
  auto far_n = [&](int h, int t0, bool of_keys) {
    if (h % group != 0) return 0;
    if (t0 + kGroupTile < n) return std::min(kGroupTile, n - t0 - kGroupTile);
    return of_keys ? std::min(kGroupTile, n) : 0;
  };
  constexpr int kB = kBundleHeads<kChunks, KV>;
  for (int t0 = 0; t0 < n; t0 += kGroupTile) {  // bundles of a kv head's query heads
    const int tn = std::min(kGroupTile, n - t0);
    const auto* far = t0 + kGroupTile < n ? keys + t0 + kGroupTile : values;
    for (int h = h0; h < h0 + heads;) {
      const int b_n = std::min(kB, group - h % group);
      scores_of<kChunks>(b_n, scores_row(h) + t0, stride, q + h * hd, keys + t0, off_of(h), tn,
                         s.scale, far, far_n(h, t0, true));
      h += b_n;
    }
  }
  for (int h = h0; h < h0 + heads; ++h) softmax_avx512(scores_row(h), n);
  // Bundles of heads: with a kv head for several query heads, a kv head's (read once for all),
  // else several kv heads' side by side; only a bundle's first head, where it is the first of
  // its kv head, asks for rows ahead (all of the bundle's kv heads' rows).
  for (int t0 = 0; t0 < n; t0 += kGroupTile) {
    const int tn = std::min(kGroupTile, n - t0), next_n = far_n(h0, t0, false);
    const auto* far = values + t0 + kGroupTile;
    for (int h = h0; h < h0 + heads;) {
      float* oh = o + h * hd;
      const float* ph = scores_row(h) + t0;
      if (group > 1) {
        const int b_n = std::min(kB, group - h % group);
        weighted_sums_of<kChunks, true>(b_n, oh, ph, stride, values + t0, off_of(h), tn, t0 == 0,
                                        far, h % group == 0 ? next_n : 0, kBytes);
        h += b_n;
      } else {
        const int b_n = std::min(kB, h0 + heads - h);
        weighted_sums_of<kChunks, false>(b_n, oh, ph, stride, values + t0, off_of(h), tn, t0 == 0,
                                         far, next_n, b_n * kBytes);
        h += b_n;
      }
    }
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
    _mm256_storeu_ps(s1 + t0, _mm512_castps512_ps256(_mm512_shuffle_f32x4(sums, sums, 0xee)));
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
