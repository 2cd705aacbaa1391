// CPU ops (GEMM in gemm.cpp): element-wise ops as loops the compiler vectorises (SiLU and RMSNorm
// in AVX-512), split over the rank's threads when large; attention parallel over (token, kv head)
// with OpenMP.
#include "ops/cpu/cpu_ops.h"

// GCC 12 warns inside its own AVX-512 headers (the self-initialised "undefined" vectors).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/gemm.h"

namespace tpllama::ops::cpu {

namespace {
// Below these sizes a parallel region costs more than it saves (measured on stories260K and the
// tiny demo model: 2 threads were 2-3x slower than 1 without these thresholds).
constexpr int64_t kParallelElements = 1 << 16;
constexpr int64_t kParallelWork = 1 << 18;
}  // namespace

void rope(Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  const int64_t rows = x.size(0);
  const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (rows * n_heads * head_dim >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos.as<float>() + r * half;
    const float* s = sin.as<float>() + r * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x.as<float>() + (r * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {  // rotate-half: pairs (i, i + half)
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = a * s[i] + b * c[i];
      }
    }
  }
}

void embedding(Tensor out, Tensor table, Tensor tokens, int vocab_begin) {
  const int64_t d = table.size(1), rows = table.size(0);
  for (int64_t m = 0; m < tokens.size(0); ++m) {
    const int64_t local = tokens.as<int32_t>()[m] - vocab_begin;
    float* o = out.as<float>() + m * d;
    if (local >= 0 && local < rows)
      std::memcpy(o, table.as<float>() + local * d, static_cast<size_t>(d) * sizeof(float));
    else
      std::memset(o, 0, static_cast<size_t>(d) * sizeof(float));
  }
}

void add(Tensor x, Tensor y) {
  float* a = x.as<float>();
  const float* b = y.as<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

namespace {

// The lanes of a 16-float vector that hold one of the `remaining` elements left (all 16 when at
// least 16 are).
inline __mmask16 lanes(int64_t remaining) {
  return remaining >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1);
}

// e^x: 2^n · p(r), x = n·ln2 + r, |r| <= ln2/2, p the degree-6 Taylor polynomial (relative error
// below 2e-7); inputs are clamped to [-87, 88], so e^x stays a finite normal float.
__attribute__((target("avx512f"))) __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147180559945309f), x);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// g[0, n) = silu(g) · u = g / (1 + e^-g) · u.
__attribute__((target("avx512f"))) void silu_mul_avx512(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(k, g + i);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    const __m512 sig = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(g + i, k, _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_maskz_loadu_ps(k, u + i)));
  }
}

// o = x / rms(x) · w over one row of d, the sum of squares in double (as the portable loop).
__attribute__((target("avx512f"))) void rms_norm_avx512(float* o, const float* x, const float* w, int64_t d,
                                                        float eps) {
  __m512d ss0 = _mm512_setzero_pd(), ss1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    ss0 = _mm512_fmadd_pd(lo, lo, ss0);
    ss1 = _mm512_fmadd_pd(hi, hi, ss1);
  }
  double ss = _mm512_reduce_add_pd(_mm512_add_pd(ss0, ss1));
  for (int64_t j = i; j < d; ++j) ss += static_cast<double>(x[j]) * x[j];
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps)));
  for (int64_t j = 0; j < d; j += 16) {
    const __mmask16 k = lanes(d - j);
    const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), inv);
    _mm512_mask_storeu_ps(o + j, k, _mm512_mul_ps(scaled, _mm512_maskz_loadu_ps(k, w + j)));
  }
}

// s[0, n) = softmax(s[0, n)), in place.
__attribute__((target("avx512f"))) void softmax_avx512(float* s, int n) {
  const int full = n / 16 * 16;
  __m512 mx = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes(n - full), s + full);
  for (int t = 0; t < full; t += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + t));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 total = _mm512_setzero_ps();
  for (int t = 0; t < n; t += 16) {
    const __mmask16 k = lanes(n - t);
    const __m512 e = _mm512_maskz_mov_ps(k, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), m)));
    _mm512_mask_storeu_ps(s + t, k, e);
    total = _mm512_add_ps(total, e);
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
  for (int t = 0; t < n; t += 16) {
    const __mmask16 k = lanes(n - t);
    _mm512_mask_storeu_ps(s + t, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + t), inv_sum));
  }
}

// The lane sums of 16 vectors as one vector (lane j: the sum of a[j]): a transpose folded into the
// additions, 15 shuffle pairs for 16 sums instead of a full reduction each.
__attribute__((target("avx512f"))) __m512 sum_lanes16(const __m512 (&a)[16]) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)  // each 128-bit lane: a[2i] and a[2i+1], two partial sums each
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // each 128-bit lane: the lane's sums of a[4i..4i+3]
    const __m512d x = _mm512_castps_pd(pairs[2 * i]), y = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  auto fold = [](__m512 x, __m512 y) {  // 128-bit lanes (x0+x1, x2+x3, y0+y1, y2+y3)
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
  };
  return fold(fold(quads[0], quads[1]), fold(quads[2], quads[3]));
}

// 16 cache elements as f32: an f32 load, or bf16 widened (its bits are the top half of an f32).
__attribute__((target("avx512f"))) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// scores[t] = scale · q·k_t for t in [0, n), 16 positions at a time; rows[t]: position t's key.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void scores_avx512(float* scores, const float* q, const KV* const* rows, int n,
                                                      float scale) {
  __m512 qv[kChunks];
  for (int c = 0; c < kChunks; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  for (int t0 = 0; t0 < n; t0 += 16) {
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) {
      // The next 16 positions' rows, requested now: they are scattered over the pool (one cache
      // line or a few each), which the hardware prefetcher does not follow.
      if (t0 + 16 + j < n)
        for (int c = 0; c < kChunks * 16 * static_cast<int>(sizeof(KV)); c += 64)
          _mm_prefetch(reinterpret_cast<const char*>(rows[t0 + 16 + j]) + c, _MM_HINT_T0);
      const KV* k = rows[std::min(t0 + j, n - 1)];  // past the end: a repeat, not stored
      acc[j] = _mm512_mul_ps(qv[0], load16(k));
      for (int c = 1; c < kChunks; ++c) acc[j] = _mm512_fmadd_ps(qv[c], load16(k + 16 * c), acc[j]);
    }
    _mm512_mask_storeu_ps(scores + t0, lanes(n - t0), _mm512_mul_ps(sum_lanes16(acc), _mm512_set1_ps(scale)));
  }
}

// o = Σ_t p[t] · v_t over t in [0, n); rows[t]: position t's value. Two sets of accumulators hide
// the FMA latency when a head is only a few vectors wide.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void weighted_sum_avx512(float* o, const float* p, const KV* const* rows, int n) {
  __m512 a[kChunks], b[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = b[c] = _mm512_setzero_ps();
  int t = 0;
  constexpr int kAhead = 8;  // positions whose rows are requested ahead (as in scores_avx512)
  for (; t + 1 < n; t += 2) {
    for (int u = t + kAhead; u < std::min(n, t + kAhead + 2); ++u)
      for (int c = 0; c < kChunks * 16 * static_cast<int>(sizeof(KV)); c += 64)
        _mm_prefetch(reinterpret_cast<const char*>(rows[u]) + c, _MM_HINT_T0);
    const __m512 pa = _mm512_set1_ps(p[t]), pb = _mm512_set1_ps(p[t + 1]);
    for (int c = 0; c < kChunks; ++c) {
      a[c] = _mm512_fmadd_ps(pa, load16(rows[t] + 16 * c), a[c]);
      b[c] = _mm512_fmadd_ps(pb, load16(rows[t + 1] + 16 * c), b[c]);
    }
  }
  if (t < n)
    for (int c = 0; c < kChunks; ++c) a[c] = _mm512_fmadd_ps(_mm512_set1_ps(p[t]), load16(rows[t] + 16 * c), a[c]);
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(o + 16 * c, _mm512_add_ps(a[c], b[c]));
}

// Per-thread scratch of one work item: the key and value row of each position, the scores.
struct AttendScratch {
  std::vector<const void*> keys, values;
  std::vector<float> scores, scores2;  // scores2: the second token of a pair
};

// One token's attention for the query heads of one kv head with AVX-512 (head_dim 16 · kChunks):
// the rows of the context looked up once, then per query head scores, softmax, weighted sum.
// KV elements as f32 (the portable kernel).
inline float as_f32(float v) { return v; }
inline float as_f32(uint16_t v) { return bf16_to_f32(v); }

// fn(t, key, value) for positions t in [0, n) of the sequence v's table names, with the key and
// value rows of kv head kv_head. Block by block: one table read and one multiply a block, an add a
// position (no division).
template <typename KV, typename Fn>
void for_each_row(const KvView& v, int64_t n, const AttentionShape& s, int kv_head, Fn&& fn) {
  const int bs = s.block_size;
  const int64_t stride = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
  const int64_t off = static_cast<int64_t>(kv_head) * s.head_dim;
  for (int64_t t0 = 0; t0 < n; t0 += bs) {
    const KV* key = static_cast<const KV*>(v.keys) + static_cast<int64_t>(v.blocks[t0 / bs]) * bs * stride + off;
    const KV* value = static_cast<const KV*>(v.values) + (key - static_cast<const KV*>(v.keys));
    for (int64_t t = t0; t < std::min(n, t0 + bs); ++t, key += stride, value += stride) fn(t, key, value);
  }
}

// w.keys / w.values [0, n) = the key and value rows of kv head kv_head at positions [0, n): looked
// up once per item, shared by its query heads.
template <typename KV>
void look_up_rows(const KvView& v, int n, const AttentionShape& s, int kv_head, AttendScratch& w) {
  for_each_row<KV>(v, n, s, kv_head, [&w](int64_t t, const KV* key, const KV* value) {
    w.keys[static_cast<size_t>(t)] = key;
    w.values[static_cast<size_t>(t)] = value;
  });
}

template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void attend_avx512(float* o, const float* q, const KvView& v, const AttentionShape& s,
                                                      int kv_head, AttendScratch& w) {
  const int hd = 16 * kChunks, group = s.n_heads / s.n_kv_heads, n = v.n_ctx;
  look_up_rows<KV>(v, n, s, kv_head, w);
  const auto* keys = reinterpret_cast<const KV* const*>(w.keys.data());
  const auto* values = reinterpret_cast<const KV* const*>(w.values.data());
  for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    scores_avx512<kChunks>(w.scores.data(), q + h * hd, keys, n, s.scale);
    softmax_avx512(w.scores.data(), n);
    weighted_sum_avx512<kChunks>(o + h * hd, w.scores.data(), values, n);
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
__attribute__((target("avx512f"))) void scores_pair_avx512(float* s0, float* s1, const float* q0, const float* q1,
                                                           const KV* const* rows, int n, float scale) {
  for (int t0 = 0; t0 < n; t0 += 8) {
    __m512 acc[16];
    for (int j = 0; j < 8; ++j) {
      if (t0 + 16 + j < n)  // 16 positions ahead, as scores_avx512
        for (int c = 0; c < kChunks * 16 * static_cast<int>(sizeof(KV)); c += 64)
          _mm_prefetch(reinterpret_cast<const char*>(rows[t0 + 16 + j]) + c, _MM_HINT_T0);
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
    const __m512 sums = _mm512_mul_ps(sum_lanes16(acc), _mm512_set1_ps(scale));  // lanes 0-7: token 0; 8-15: token 1
    _mm256_storeu_ps(s0 + t0, _mm512_castps512_ps256(sums));
    _mm256_storeu_ps(s1 + t0, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1)));
  }
}

// o0 = Σ_{t < n0} p0[t] · v_t and o1 = Σ_{t < n1} p1[t] · v_t, each row read once for both.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void weighted_sum_pair_avx512(float* o0, float* o1, const float* p0, const float* p1,
                                                                 const KV* const* rows, int n0, int n1) {
  __m512 a[kChunks], b[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = b[c] = _mm512_setzero_ps();
  const int both = std::min(n0, n1), n = std::max(n0, n1);
  constexpr int kAhead = 8;
  for (int t = 0; t < n; ++t) {
    if (t + kAhead < n)
      for (int c = 0; c < kChunks * 16 * static_cast<int>(sizeof(KV)); c += 64)
        _mm_prefetch(reinterpret_cast<const char*>(rows[t + kAhead]) + c, _MM_HINT_T0);
    if (t < both) {
      const __m512 pa = _mm512_set1_ps(p0[t]), pb = _mm512_set1_ps(p1[t]);
      for (int c = 0; c < kChunks; ++c) {
        const __m512 v = load16(rows[t] + 16 * c);
        a[c] = _mm512_fmadd_ps(pa, v, a[c]);
        b[c] = _mm512_fmadd_ps(pb, v, b[c]);
      }
    } else if (n0 > n1) {
      for (int c = 0; c < kChunks; ++c) a[c] = _mm512_fmadd_ps(_mm512_set1_ps(p0[t]), load16(rows[t] + 16 * c), a[c]);
    } else {
      for (int c = 0; c < kChunks; ++c) b[c] = _mm512_fmadd_ps(_mm512_set1_ps(p1[t]), load16(rows[t] + 16 * c), b[c]);
    }
  }
  for (int c = 0; c < kChunks; ++c) {
    _mm512_storeu_ps(o0 + 16 * c, a[c]);
    _mm512_storeu_ps(o1 + 16 * c, b[c]);
  }
}

// Two tokens of one sequence (the same block table; any contexts n0, n1) for the query heads of
// one kv head.
template <int kChunks, typename KV>
__attribute__((target("avx512f"))) void attend_pair_avx512(float* o0, float* o1, const float* q0, const float* q1,
                                                           const KvView& v0, const KvView& v1, const AttentionShape& s,
                                                           int kv_head, AttendScratch& w) {
  const int hd = 16 * kChunks, group = s.n_heads / s.n_kv_heads, n = std::max(v0.n_ctx, v1.n_ctx);
  look_up_rows<KV>(v0, n, s, kv_head, w);
  const auto* keys = reinterpret_cast<const KV* const*>(w.keys.data());
  const auto* values = reinterpret_cast<const KV* const*>(w.values.data());
  for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    scores_pair_avx512<kChunks>(w.scores.data(), w.scores2.data(), q0 + h * hd, q1 + h * hd, keys, n, s.scale);
    softmax_avx512(w.scores.data(), v0.n_ctx);
    softmax_avx512(w.scores2.data(), v1.n_ctx);
    weighted_sum_pair_avx512<kChunks>(o0 + h * hd, o1 + h * hd, w.scores.data(), w.scores2.data(), values, v0.n_ctx,
                                      v1.n_ctx);
  }
}

using AttendPairFn = void (*)(float*, float*, const float*, const float*, const KvView&, const KvView&,
                              const AttentionShape&, int, AttendScratch&);

AttendPairFn attend_pair_kernel(int head_dim, DType kv) {
  static constexpr AttendPairFn f32[] = {
      &attend_pair_avx512<1, float>, &attend_pair_avx512<2, float>, &attend_pair_avx512<3, float>,
      &attend_pair_avx512<4, float>, &attend_pair_avx512<5, float>, &attend_pair_avx512<6, float>,
      &attend_pair_avx512<7, float>, &attend_pair_avx512<8, float>};
  static constexpr AttendPairFn bf16[] = {
      &attend_pair_avx512<1, uint16_t>, &attend_pair_avx512<2, uint16_t>, &attend_pair_avx512<3, uint16_t>,
      &attend_pair_avx512<4, uint16_t>, &attend_pair_avx512<5, uint16_t>, &attend_pair_avx512<6, uint16_t>,
      &attend_pair_avx512<7, uint16_t>, &attend_pair_avx512<8, uint16_t>};
  if (!avx512_head_dim(head_dim)) return nullptr;
  return (kv == DType::kBF16 ? bf16 : f32)[head_dim / 16 - 1];
}

using AttendFn = void (*)(float*, const float*, const KvView&, const AttentionShape&, int, AttendScratch&);

// The kernel for a head_dim and KV dtype, or null where it has none (not a multiple of 16, or
// over 128).
AttendFn attend_kernel(int head_dim, DType kv) {
  static constexpr AttendFn f32[] = {&attend_avx512<1, float>, &attend_avx512<2, float>, &attend_avx512<3, float>,
                                     &attend_avx512<4, float>, &attend_avx512<5, float>, &attend_avx512<6, float>,
                                     &attend_avx512<7, float>, &attend_avx512<8, float>};
  static constexpr AttendFn bf16[] = {&attend_avx512<1, uint16_t>, &attend_avx512<2, uint16_t>,
                                      &attend_avx512<3, uint16_t>, &attend_avx512<4, uint16_t>,
                                      &attend_avx512<5, uint16_t>, &attend_avx512<6, uint16_t>,
                                      &attend_avx512<7, uint16_t>, &attend_avx512<8, uint16_t>};
  if (!avx512_head_dim(head_dim)) return nullptr;
  return (kv == DType::kBF16 ? bf16 : f32)[head_dim / 16 - 1];
}

// One (token, head) of attention, portable: the reference the AVX-512 kernel is tested against.
template <typename KV>
void attend_portable(float* o, const float* qh, const KvView& v, int64_t kv_stride, int64_t kv_off,
                     const AttentionShape& s, float* scores) {
  const int hd = s.head_dim, bs = s.block_size;
  auto row_of = [&](int t) { return (static_cast<int64_t>(v.blocks[t / bs]) * bs + t % bs) * kv_stride + kv_off; };
  float max_score = -INFINITY;
  for (int t = 0; t < v.n_ctx; ++t) {  // scores = q·k / sqrt(head_dim)
    const KV* k = static_cast<const KV*>(v.keys) + row_of(t);
    float dot = 0;
#pragma omp simd reduction(+ : dot)  // lets the compiler reorder the sum into vector lanes
    for (int i = 0; i < hd; ++i) dot += qh[i] * as_f32(k[i]);
    scores[t] = dot * s.scale;
    max_score = std::max(max_score, scores[t]);
  }
  float sum = 0;  // softmax over the context
  for (int t = 0; t < v.n_ctx; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  std::fill(o, o + hd, 0.0f);  // weighted sum of values
  const float inv_sum = 1.0f / sum;
  for (int t = 0; t < v.n_ctx; ++t) {
    const float p = scores[t] * inv_sum;
    const KV* val = static_cast<const KV*>(v.values) + row_of(t);
#pragma omp simd
    for (int i = 0; i < hd; ++i) o[i] += p * as_f32(val[i]);
  }
}

// Prefill runs on the GEMM. A run is kGemmRun or more consecutive tokens of one sequence at
// consecutive positions (token i of the run sees c0 + i positions). Per kv head, its keys are
// packed as a GEMM weight (positions as rows) and its values as Vᵀ (head dimensions as rows,
// each panel's positions in order, so any prefix of positions is itself a packed panel); then
// blocks of the run's queries, all query heads of the group stacked, take S = Q·Kᵀ over the
// positions the block's last token sees, a causal softmax, and O = P·V panel by panel. The
// products run at the GEMM's FLOP rate, where the per-token kernels are bound by loads and lane
// reductions (a 1000-token prompt: 1.16x prefill, see the README's performance section).
// Positions a block's earlier tokens do not see enter P·V with probability 0.
constexpr int kGemmRun = 32;
constexpr int64_t kGemmRows = 240;  // stacked query rows per block at most: one GEMM row block
// Working memory is bounded whatever the context: kv heads are packed in passes of at most
// kPackFloats, and a thread's scores (rows × positions) take at most kScoreFloats.
constexpr int64_t kPackFloats = int64_t{16} << 20;  // 64 MiB
constexpr int64_t kScoreFloats = int64_t{2} << 20;  // 8 MiB a thread

// A float buffer of at least n elements, 64-byte aligned (the GEMM's packed weights), reusing v.
float* aligned_floats(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n) + 16);
  const auto misalign = reinterpret_cast<uintptr_t>(v.data()) % 64;
  return v.data() + (misalign == 0 ? 0 : (64 - misalign) / sizeof(float));
}

// row[0, visible) ← e^(scale · (row - max)), row[visible, n) ← 0; returns 1 / the sum.
__attribute__((target("avx512f"))) float causal_softmax_avx512(float* row, int64_t visible, int64_t n, float scale) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t t = 0; t < visible; t += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, lanes(visible - t), row + t));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sc = _mm512_set1_ps(scale);
  __m512 total = _mm512_setzero_ps();
  for (int64_t t = 0; t < visible; t += 16) {
    const __mmask16 k = lanes(visible - t);
    const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + t), m), sc);
    const __m512 e = _mm512_maskz_mov_ps(k, exp_avx512(x));
    _mm512_mask_storeu_ps(row + t, k, e);
    total = _mm512_add_ps(total, e);
  }
  for (int64_t t = visible; t < n; t += 16) _mm512_mask_storeu_ps(row + t, lanes(n - t), _mm512_setzero_ps());
  return 1.0f / _mm512_reduce_add_ps(total);
}

// Per-thread buffers of the run GEMMs.
struct RunScratch {
  std::vector<float> x, scores, o, inv;
};

// Keys and values of kv head g over positions [0, n) into kp (keys as gemm.h's panels: position
// t's dimension d at [((t / 32) · hd + d) · 32 + t % 32], positions past n zero) and vp (Vᵀ:
// position t's dimensions 32p.. at [(p · n + t) · 32, + 32), dimensions past hd zero).
template <typename KV>
void pack_head(float* kp, int64_t keys_floats, float* vp, const KvView& first, int64_t n, int g,
               const AttentionShape& s) {
  const int hd = s.head_dim;
  const int64_t panels = (hd + kPanelRows - 1) / kPanelRows;
  std::fill(kp + n / kPanelRows * kPanelRows * hd, kp + keys_floats, 0.0f);
  for_each_row<KV>(first, n, s, g, [&](int64_t t, const KV* key, const KV* value) {
    float* kdst = kp + (t / kPanelRows * hd) * kPanelRows + t % kPanelRows;
    for (int d = 0; d < hd; ++d) kdst[d * kPanelRows] = as_f32(key[d]);
    for (int64_t p = 0; p < panels; ++p) {
      float* vdst = vp + (p * n + t) * kPanelRows;
      for (int64_t j = 0; j < kPanelRows; ++j)
        vdst[j] = p * kPanelRows + j < hd ? as_f32(value[p * kPanelRows + j]) : 0.0f;
    }
  });
}

// The run of T tokens whose first token's view is `first` (q and out: the run's first row).
template <typename KV>
void attend_run_gemm(float* out, const float* q, const KvView& first, int64_t T, const AttentionShape& s) {
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads, threads = omp_get_max_threads();
  const int64_t q_stride = int64_t{s.n_heads} * hd;
  const int64_t c0 = first.n_ctx, n = c0 + T - 1;  // the positions the run's last token sees
  const int64_t panels = (hd + kPanelRows - 1) / kPanelRows;
  const int64_t keys_floats = static_cast<int64_t>(packed_bytes(n, hd, DType::kF32) / sizeof(float));
  const int64_t head_floats = keys_floats + panels * kPanelRows * n;
  const int pass_heads = static_cast<int>(std::clamp<int64_t>(kPackFloats / head_floats, 1, s.n_kv_heads));
  // Tokens a block: at most kGemmRows rows and kScoreFloats of scores, and small enough that a
  // pass has work for every thread twice over.
  int64_t per_block = std::max<int64_t>(1, std::min(kGemmRows, kScoreFloats / n) / group);
  const int64_t wanted = (2 * threads + pass_heads - 1) / pass_heads;
  per_block = std::max<int64_t>(1, std::min(per_block, (T + wanted - 1) / wanted));
  const int64_t blocks = (T + per_block - 1) / per_block;
  thread_local std::vector<float> packed_store;
  float* packed = aligned_floats(packed_store, pass_heads * head_floats);
  const bool parallel = T * n * int64_t{s.n_heads} * hd >= kParallelWork;
  for (int g0 = 0; g0 < s.n_kv_heads; g0 += pass_heads) {
    const int heads = std::min(pass_heads, s.n_kv_heads - g0);
#pragma omp parallel if (parallel)
    {
      thread_local RunScratch w;
#pragma omp for schedule(dynamic, 1)
      for (int g = g0; g < g0 + heads; ++g) {
        float* kp = packed + (g - g0) * head_floats;
        pack_head<KV>(kp, keys_floats, kp + keys_floats, first, n, g, s);
      }
      // Items (kv head, block of tokens), the blocks that see most first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < heads * blocks; ++item) {
        const int g = g0 + static_cast<int>(item % heads);
        const int64_t b0 = (blocks - 1 - item / heads) * per_block, nt = std::min(per_block, T - b0);
        const int64_t rows = nt * group, nb = c0 + b0 + nt - 1;  // the positions the block's last token sees
        const float* kp = packed + (g - g0) * head_floats;
        const float* vp = kp + keys_floats;
        float* x = aligned_floats(w.x, rows * hd);
        float* sc = aligned_floats(w.scores, rows * nb);
        float* o = aligned_floats(w.o, rows * kPanelRows);
        w.inv.resize(static_cast<size_t>(rows));
        for (int hi = 0; hi < group; ++hi)  // row hi · nt + i: token b0 + i, query head g · group + hi
          for (int64_t i = 0; i < nt; ++i)
            std::memcpy(x + (hi * nt + i) * hd, q + (b0 + i) * q_stride + int64_t{g * group + hi} * hd,
                        static_cast<size_t>(hd) * sizeof(float));
        gemm(sc, x, rows, kp, DType::kF32, nb, hd, 1);
        for (int64_t r = 0; r < rows; ++r)
          w.inv[static_cast<size_t>(r)] = causal_softmax_avx512(sc + r * nb, c0 + b0 + r % nt, nb, s.scale);
        for (int64_t p = 0; p < panels; ++p) {
          const int64_t width = std::min<int64_t>(kPanelRows, hd - p * kPanelRows);
          gemm(o, sc, rows, vp + p * n * kPanelRows, DType::kF32, width, nb, 1);  // the panel's first nb positions
          for (int hi = 0; hi < group; ++hi)
            for (int64_t i = 0; i < nt; ++i) {
              const int64_t r = hi * nt + i;
              float* dst = out + (b0 + i) * q_stride + int64_t{g * group + hi} * hd + p * kPanelRows;
              for (int64_t j = 0; j < width; ++j) dst[j] = o[r * width + j] * w.inv[static_cast<size_t>(r)];
            }
        }
      }
    }
  }
}

}  // namespace

void attention(Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& s) {
  const int64_t n_tokens = static_cast<int64_t>(kv.size());
  const int hd = s.head_dim;
  const int group = s.n_heads / s.n_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(s.n_kv_heads) * hd;
  const int64_t q_stride = static_cast<int64_t>(s.n_heads) * hd;
  int max_ctx = 0;
  int64_t work = 0;  // multiply-adds, to decide whether threads pay for themselves
  for (const KvView& v : kv) {
    max_ctx = std::max(max_ctx, v.n_ctx);
    work += static_cast<int64_t>(v.n_ctx) * s.n_heads * hd * 2;
  }
  const DType kv_dtype = kv.empty() ? DType::kF32 : kv[0].dtype;
  for (const KvView& v : kv) TPLLAMA_CHECK(v.dtype == kv_dtype, "attention: tokens of one step read one cache");
  const AttendFn kernel = attend_kernel(hd, kv_dtype);
  const auto portable = kv_dtype == DType::kBF16 ? &attend_portable<uint16_t> : &attend_portable<float>;
  if (kernel != nullptr) {
    // Work items in the order that keeps what consecutive items read in each core's L2: for
    // prefill chunks (most tokens continue the previous token's sequence) one kv head's tokens in
    // turn, two tokens of a sequence an item, which share that head's keys and values (a
    // 1000-token prompt: 1.17x for the order); for decode (a sequence per token) one token's kv
    // heads in turn, neighbours in every cache row.
    auto same_sequence = [&kv](int64_t a, int64_t b) {  // one table of one pool
      const KvView &x = kv[static_cast<size_t>(a)], &y = kv[static_cast<size_t>(b)];
      return x.blocks == y.blocks && x.keys == y.keys && x.values == y.values;
    };
    // Runs of kGemmRun or more tokens (one sequence, consecutive positions) go to the GEMMs.
    std::vector<char> on_gemm(static_cast<size_t>(n_tokens), 0);
    for (int64_t m = 0, e = 0; m < n_tokens; m = e) {
      for (e = m + 1; e < n_tokens && same_sequence(e - 1, e) &&
                      kv[static_cast<size_t>(e)].n_ctx == kv[static_cast<size_t>(e - 1)].n_ctx + 1;
           ++e) {
      }
      if (e - m < kGemmRun) continue;
      const auto run = kv_dtype == DType::kBF16 ? &attend_run_gemm<uint16_t> : &attend_run_gemm<float>;
      run(out.as<float>() + m * q_stride, q.as<float>() + m * q_stride, kv[static_cast<size_t>(m)], e - m, s);
      std::fill(on_gemm.begin() + m, on_gemm.begin() + e, 1);
    }
    int64_t rest = 0, continued = 0;
    work = 0;
    for (int64_t m = 0; m < n_tokens; ++m) {
      if (on_gemm[static_cast<size_t>(m)]) continue;
      ++rest;
      continued += m > 0 && !on_gemm[static_cast<size_t>(m - 1)] && same_sequence(m - 1, m);
      work += static_cast<int64_t>(kv[static_cast<size_t>(m)].n_ctx) * s.n_heads * hd * 2;
    }
    if (rest == 0) return;
    const bool by_head = 2 * continued > rest;
    const AttendPairFn pair = by_head ? attend_pair_kernel(hd, kv_dtype) : nullptr;
    std::vector<int64_t> units;  // first token of each unit: one token, or two of one sequence
    std::vector<char> paired;    // whether the unit is two tokens
    for (int64_t m = 0; m < n_tokens; ++m) {
      if (on_gemm[static_cast<size_t>(m)]) continue;
      units.push_back(m);
      paired.push_back(pair != nullptr && m + 1 < n_tokens && !on_gemm[static_cast<size_t>(m + 1)] &&
                       same_sequence(m, m + 1));
      m += paired.back();
    }
    const int64_t n_units = static_cast<int64_t>(units.size()), items = n_units * s.n_kv_heads;
#pragma omp parallel if (work >= kParallelWork)
    {
      const size_t padded = static_cast<size_t>(max_ctx + 15) / 16 * 16;  // scores are written 16 at a time
      AttendScratch w{std::vector<const void*>(padded), std::vector<const void*>(padded), std::vector<float>(padded),
                      std::vector<float>(pair != nullptr ? padded : 0)};
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < items; ++i) {
        const int64_t u = by_head ? i % n_units : i / s.n_kv_heads;
        const int g = static_cast<int>(by_head ? i / n_units : i % s.n_kv_heads);
        const int64_t m = units[static_cast<size_t>(u)];
        float* o = out.as<float>() + m * q_stride;
        const float* qm = q.as<float>() + m * q_stride;
        if (paired[static_cast<size_t>(u)])
          pair(o, o + q_stride, qm, qm + q_stride, kv[static_cast<size_t>(m)], kv[static_cast<size_t>(m + 1)], s, g, w);
        else
          kernel(o, qm, kv[static_cast<size_t>(m)], s, g, w);
      }
    }
    return;
  }
#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<float> scores(static_cast<size_t>(max_ctx));
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t m = 0; m < n_tokens; ++m)
      for (int h = 0; h < s.n_heads; ++h)
        portable(out.as<float>() + m * q_stride + h * hd, q.as<float>() + m * q_stride + h * hd,
                 kv[static_cast<size_t>(m)], kv_stride, static_cast<int64_t>(h / group) * hd, s, scores.data());
  }
}

void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) {
  const int64_t rows = x.size(0), d = x.size(1);
  const float* w = weight.as<float>();
  const bool avx512 = avx512_kernels();
#pragma omp parallel for schedule(static) if (rows * d >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.as<float>() + r * d;
    float* o = out.as<float>() + r * d;
    if (avx512) {
      rms_norm_avx512(o, xr, w, d, eps);
      continue;
    }
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * w[i];
  }
}

void silu_mul(Tensor gate, Tensor up) {
  float* g = gate.as<float>();
  const float* u = up.as<float>();
  const int64_t n = gate.numel();
  if (avx512_kernels()) {  // in runs of 1024 elements, so a thread's share is contiguous
    const int64_t runs = (n + 1023) / 1024;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < runs; ++i)
      silu_mul_avx512(g + i * 1024, u + i * 1024, std::min<int64_t>(1024, n - i * 1024));
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void fill_uniform(float* out, int64_t rows, int64_t cols, const UniformFill& f) {
  const int64_t present = std::clamp<int64_t>(f.present, 0, rows);
#pragma omp parallel for schedule(static) if (present * cols >= (int64_t{1} << 20))
  for (int64_t r = 0; r < present; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t z = splitmix64(f.stream + static_cast<uint64_t>((f.row0 + r) * f.full_cols + f.col0 + c));
      const float u = static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);  // exact, in [-1, 1)
      out[r * cols + c] = std::fma(f.scale, u, f.offset);
    }
  std::fill(out + present * cols, out + rows * cols, 0.0f);
}

void argmax_rows(Tensor index, Tensor value, Tensor logits) {
  const int64_t cols = logits.size(1);
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* row = logits.as<float>() + r * cols;
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = c;
    index.as<int32_t>()[r] = static_cast<int32_t>(best);
    value.as<float>()[r] = row[best];
  }
}

}  // namespace tpllama::ops::cpu
