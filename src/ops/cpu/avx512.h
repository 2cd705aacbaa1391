// The AVX-512 building blocks the CPU kernels share: lane masks, a vectorised e^x, softmax, the
// lane sums of 16 vectors, f32/bf16 loads, and the row-wise SiLU·mul and RMSNorm. Only the fast
// paths include it; each op's portable loop is the reference they are tested against.
#pragma once

// GCC 12 warns inside its own AVX-512 headers (the self-initialised "undefined" vectors).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cmath>
#include <cstdint>

namespace tpllama::ops::cpu::avx512 {

// The lanes of a 16-float vector that hold one of the `remaining` elements left (all 16 when at
// least 16 are).
inline __mmask16 lanes(int64_t remaining) {
  return remaining >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1);
}

// Stores one row of a GEMM tile: the `valid` (at most 32) columns of lo (0-15) and hi (16-31) at
// o, added to what o holds when accumulating (a later k block of the same product).
__attribute__((target("avx512f"))) inline void store_tile_columns(float* o, int valid,
                                                                  bool accumulate, __m512 lo,
                                                                  __m512 hi) {
  const __mmask16 m0 = lanes(valid), m1 = lanes(valid - 16 < 0 ? 0 : valid - 16);
  if (accumulate) {
    lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m0, o));
    hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m1, o + 16));
  }
  _mm512_mask_storeu_ps(o, m0, lo);
  _mm512_mask_storeu_ps(o + 16, m1, hi);
}

// e^x: 2^n · p(r), x = n·ln2 + r, |r| <= ln2/2, p the degree-6 Taylor polynomial (relative error
// below 2e-7); inputs are clamped to [-87, 88], so e^x stays a finite normal float.
__attribute__((target("avx512f"))) inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT);
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
__attribute__((target("avx512f"))) inline void silu_mul_avx512(float* g, const float* u,
                                                               int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(k, g + i);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    const __m512 sig = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(g + i, k,
                          _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_maskz_loadu_ps(k, u + i)));
  }
}

// o = x / rms(x) · w over one row of d, the sum of squares in double (as the portable loop).
__attribute__((target("avx512f"))) inline void rms_norm_avx512(float* o, const float* x,
                                                               const float* w, int64_t d,
                                                               float eps) {
  __m512d ss0 = _mm512_setzero_pd(), ss1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    ss0 = _mm512_fmadd_pd(lo, lo, ss0);
    ss1 = _mm512_fmadd_pd(hi, hi, ss1);
  }
  double ss = _mm512_reduce_add_pd(_mm512_add_pd(ss0, ss1));
  for (int64_t j = i; j < d; ++j) ss += static_cast<double>(x[j]) * x[j];
  const __m512 inv =
      _mm512_set1_ps(static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps)));
  for (int64_t j = 0; j < d; j += 16) {
    const __mmask16 k = lanes(d - j);
    const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), inv);
    _mm512_mask_storeu_ps(o + j, k, _mm512_mul_ps(scaled, _mm512_maskz_loadu_ps(k, w + j)));
  }
}

// s[0, n) = softmax(s[0, n)), in place.
__attribute__((target("avx512f"))) inline void softmax_avx512(float* s, int n) {
  const int full = n / 16 * 16;
  __m512 mx = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes(n - full), s + full);
  for (int t = 0; t < full; t += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + t));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 total = _mm512_setzero_ps();
  for (int t = 0; t < n; t += 16) {
    const __mmask16 k = lanes(n - t);
    const __m512 e =
        _mm512_maskz_mov_ps(k, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), m)));
    _mm512_mask_storeu_ps(s + t, k, e);
    total = _mm512_add_ps(total, e);
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
  for (int t = 0; t < n; t += 16) {
    const __mmask16 k = lanes(n - t);
    _mm512_mask_storeu_ps(s + t, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + t), inv_sum));
  }
}

// 128-bit lanes (x0+x1, x2+x3, y0+y1, y2+y3). A function, not a lambda in sum_lanes16: GCC does
// not give a lambda its enclosing function's target, so without -march=native it had no AVX-512.
__attribute__((target("avx512f"))) inline __m512 fold_lanes(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

// The lane sums of 16 vectors as one vector (lane j: the sum of a[j]): a transpose folded into the
// additions, 15 shuffle pairs for 16 sums instead of a full reduction each.
__attribute__((target("avx512f"))) inline __m512 sum_lanes16(const __m512 (&a)[16]) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)  // each 128-bit lane: a[2i] and a[2i+1], two partial sums each
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // each 128-bit lane: the lane's sums of a[4i..4i+3]
    const __m512d x = _mm512_castps_pd(pairs[2 * i]), y = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  return fold_lanes(fold_lanes(quads[0], quads[1]), fold_lanes(quads[2], quads[3]));
}

// 16 cache elements as f32: an f32 load, or bf16 widened (its bits are the top half of an f32).
__attribute__((target("avx512f"))) inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// Asks for the cache lines of `bytes` bytes at `row` ahead of their use: the rows of a context are
// scattered over the KV pool (one cache line or a few each), which the hardware prefetcher does
// not follow.
inline void prefetch_row(const void* row, int bytes) {
  for (int c = 0; c < bytes; c += 64) _mm_prefetch(static_cast<const char*>(row) + c, _MM_HINT_T0);
}
// The same into L2 only: for rows wanted a while later, which would crowd L1 meanwhile.
inline void prefetch_row_l2(const void* row, int bytes) {
  for (int c = 0; c < bytes; c += 64) _mm_prefetch(static_cast<const char*>(row) + c, _MM_HINT_T1);
}

}  // namespace tpllama::ops::cpu::avx512
