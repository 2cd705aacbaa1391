// int8 panels (layout in gemm.h): two kernel families over one layout. Widening, for a row or so
// of x: each 16 bytes of a panel (4 rows × 4 k) become 16 f32 and meet 4 k of x broadcast, so x
// stays exact and decode streams the panel at memory speed. VNNI, for more rows: x quantized per
// group, 64 multiply-adds a vpdpbusd. Portable kernels compute the same as each, in plain C++.
#include "ops/cpu/gemm_int8.h"

// GCC 12 warns inside its own AVX-512 headers (the self-initialised "undefined" vectors).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "ops/cpu/avx512.h"

namespace tpllama::ops::cpu::int8 {
namespace {

constexpr int64_t kQuadBytes = 4 * kPanelRows;        // 4 k of a panel's 32 rows
constexpr int64_t kRowScalarsBytes = kPanelRows * 4;  // one group's 32 scales, or 32 biases
constexpr int64_t kGroupBytes =
    kInt8Group * kPanelRows + kRowScalarsBytes;  // a whole group's values and scales
static_assert(kInt8Group % 4 == 0 && kInt8Group >= 4, "groups hold whole quads of k");
static_assert(kInt8Group * 255 * 127 < (int64_t{1} << 24),
              "a group's integer dot product is exact in f32");
constexpr int kWidenRows = kInt8QuantizedRows - 1;  // most rows a widening tile takes
static_assert(kWidenRows >= 1 && kWidenRows <= 4,
              "a widening tile keeps 10 of the 32 registers a row");
// Rows of x per VNNI tile: two int32 and two f32 accumulators a row, 24 of the 32 registers.
constexpr int kVnniTileRows = 6;
// Rows of x up to which the VNNI kernel streams each panel whole, as the widening one does.
constexpr int64_t kStreamRows = 12;
// Groups per k slice of the VNNI sweep: a slice (33 KiB at 128) stays in L1 while the block's tiles
// pass over it. Measured at 32 and 128 rows on the 110m products: 8 beat 4 by 10-25% (a k = 768
// panel goes in one slice, not 512 + 256), and 2 and 6 were slower; 12 and 16 about the same.
constexpr int64_t kSliceGroups = 8;
// How far ahead of its loads a decode-height kernel prefetches. Measured on the 110m products at
// one row, two threads: 8 KiB beat 4 KiB by 2-4% and 16 KiB by 5%.
constexpr int64_t kPrefetchBytes = 8192;

int64_t quads(int64_t k) {
  return (k + 3) / 4;
}
// Where a panel of k columns keeps its biases (after every group's values and scales).
int64_t bias_offset(int64_t k) {
  return quads(k) * kQuadBytes + int8_groups(k) * kRowScalarsBytes;
}

// One tile: rows [0, rows) of x against a k slice of one panel (whole groups, but for the row's
// last).
struct Tile {
  const float* x;  // widening: x at the slice's first k, row r at x + r * ldx
  int64_t ldx;
  const uint8_t* xq;  // VNNI: x's bytes at the slice's first k, row r at xq + r * ldq
  int64_t ldq;
  const float* sx;  // VNNI: x's scales of the slice's first group, row r's at sx + r * lds
  int64_t lds;
  const int8_t* panel;  // the slice's first group
  const int32_t* bias;  // and its biases
  int64_t depth;        // k of the slice
  float* out;           // first row, first column of the panel
  int64_t ldo;
  int valid;        // columns of the panel that exist
  bool accumulate;  // add to out (later slices) instead of overwriting it
  // VNNI: lines to ask into L2 as it goes, spread over its quads: its share of the next slice, or
  // the stream ahead of a panel read whole.
  const char* ahead = nullptr;
  int64_t ahead_lines = 0;
};

__attribute__((target("avx512f"))) inline void store_row(const Tile& t, int r, __m512 lo,
                                                         __m512 hi) {
  avx512::store_tile_columns(t.out + r * t.ldo, t.valid, t.accumulate, lo, hi);
}

// The widening kernel keeps 4 partial sums a row (one per k of a quad): a, b, c, d hold rows 0-3,
// 4-7, 8-11 and 12-15 of 16, a row per 128-bit lane. Their 16 row totals, in row order.
__attribute__((target("avx512f"))) inline __m512 sum_quad_slots(__m512 a, __m512 b, __m512 c,
                                                                __m512 d) {
  const __m512 ab =
      _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a02 b02 a13 b13
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane L of s holds rows L, 4 + L, 8 + L, 12 + L.
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, s);
}

// One quad of a panel (128 bytes) widened to f32 against xb[r] (x's 4 k, in every 128-bit lane).
template <int kRows>
__attribute__((target("avx512f"))) inline void widen_quad(const int8_t* v, const __m512* xb,
                                                          __m512 (*acc)[8]) {
  for (int i = 0; i < 8; ++i) {
    const __m512 w = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(v) + i)));
    for (int r = 0; r < kRows; ++r) acc[r][i] = _mm512_fmadd_ps(xb[r], w, acc[r][i]);
  }
}

// Few rows of x (decode): bound by reading the panel, so it prefetches ahead in its one stream and
// widens each byte once for all its rows. Per group, sums in f32, then scales by the rows' s_w. It
// asks for its stream into L1, and one row keeps two sets of sums (alternate quads): at one row,
// two threads, each measured 3-5% faster on the 110m products than into L2 with one set, which was
// only as fast as VNNI on quantized x.
template <int kRows>
__attribute__((target("avx512f"))) void tile_widen(const Tile& t) {
  constexpr int kSets = kRows == 1 ? 2 : 1;
  __m512 lo[kRows], hi[kRows];
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  const char* prefetch = reinterpret_cast<const char*>(t.panel) + kPrefetchBytes;
  for (int64_t k0 = 0; k0 < t.depth; k0 += kInt8Group) {
    const int64_t gk = std::min(kInt8Group, t.depth - k0), full = gk / 4;
    const int8_t* v = t.panel + (k0 / kInt8Group) * kGroupBytes;
    const float* x = t.x + k0;
    __m512 acc[kSets][kRows][8], xb[kRows];
    for (int j = 0; j < kSets; ++j)
      for (int r = 0; r < kRows; ++r)
        for (int i = 0; i < 8; ++i) acc[j][r][i] = _mm512_setzero_ps();
    int64_t q = 0;
    for (; q + kSets <= full; q += kSets)
      for (int j = 0; j < kSets; ++j, prefetch += kQuadBytes) {
        _mm_prefetch(prefetch, _MM_HINT_T0);
        _mm_prefetch(prefetch + 64, _MM_HINT_T0);
        for (int r = 0; r < kRows; ++r)
          xb[r] = _mm512_broadcast_f32x4(_mm_loadu_ps(x + r * t.ldx + 4 * (q + j)));
        widen_quad<kRows>(v + (q + j) * kQuadBytes, xb, acc[j]);
      }
    for (; q < full; ++q, prefetch += kQuadBytes) {
      _mm_prefetch(prefetch, _MM_HINT_T0);
      _mm_prefetch(prefetch + 64, _MM_HINT_T0);
      for (int r = 0; r < kRows; ++r)
        xb[r] = _mm512_broadcast_f32x4(_mm_loadu_ps(x + r * t.ldx + 4 * q));
      widen_quad<kRows>(v + q * kQuadBytes, xb, acc[0]);
    }
    if (gk % 4 != 0) {  // the row's last k: x ends inside the quad, so read only what exists
      const auto mask = static_cast<__mmask16>((1u << (gk % 4)) - 1);
      for (int r = 0; r < kRows; ++r) {
        const __m512 tail = _mm512_maskz_loadu_ps(mask, x + r * t.ldx + 4 * full);
        xb[r] = _mm512_shuffle_f32x4(tail, tail, 0);
      }
      widen_quad<kRows>(v + full * kQuadBytes, xb, acc[0]);
      prefetch += kQuadBytes;
    }
    _mm_prefetch(prefetch, _MM_HINT_T0);  // the group's scales
    _mm_prefetch(prefetch + 64, _MM_HINT_T0);
    prefetch += kRowScalarsBytes;
    for (int j = 1; j < kSets; ++j)
      for (int r = 0; r < kRows; ++r)
        for (int i = 0; i < 8; ++i) acc[0][r][i] = _mm512_add_ps(acc[0][r][i], acc[j][r][i]);
    const float* s = reinterpret_cast<const float*>(v + quads(gk) * kQuadBytes);
    const __m512 s0 = _mm512_load_ps(s), s1 = _mm512_load_ps(s + 16);
    for (int r = 0; r < kRows; ++r) {
      lo[r] = _mm512_fmadd_ps(
          sum_quad_slots(acc[0][r][0], acc[0][r][1], acc[0][r][2], acc[0][r][3]), s0, lo[r]);
      hi[r] = _mm512_fmadd_ps(
          sum_quad_slots(acc[0][r][4], acc[0][r][5], acc[0][r][6], acc[0][r][7]), s1, hi[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) store_row(t, r, lo[r], hi[r]);
}

// acc += the 4-byte dot products of u (unsigned) and s (signed) in each 32-bit lane. The intrinsic
// (_mm512_dpbusd_epi32) compiles under GCC 12 to two register copies around every vpdpbusd of an
// unrolled tile (the accumulator in and out); the asm keeps each accumulator in its register.
__attribute__((target("avx512f,avx512vnni"), always_inline)) inline __m512i dot_bytes(__m512i acc,
                                                                                      __m512i u,
                                                                                      __m512i s) {
  asm("vpdpbusd %[s], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [s] "v"(s));
  return acc;
}

// More rows (batched decode, prefill): bytes of x times bytes of the panel, exact in int32 per
// group (starting from the bias, which takes out the +128 of x), then f32 scaled by s_w · s_x.
template <int kRows>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_vnni(const Tile& t) {
  __m512 lo[kRows], hi[kRows];
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  const int64_t all_quads = quads(t.depth);
  const char* ahead = t.ahead;
  int64_t due = 0;  // prefetches owed: ahead_lines spread evenly over the slice's quads
  for (int64_t k0 = 0; k0 < t.depth; k0 += kInt8Group) {
    const int64_t g = k0 / kInt8Group, gq = quads(std::min(kInt8Group, t.depth - k0));
    const int8_t* v = t.panel + g * kGroupBytes;
    const uint8_t* x = t.xq + k0;
    __m512i a0[kRows], a1[kRows];
    const __m512i b0 = _mm512_load_si512(t.bias + g * kPanelRows),
                  b1 = _mm512_load_si512(t.bias + g * kPanelRows + 16);
    for (int r = 0; r < kRows; ++r) {
      a0[r] = b0;
      a1[r] = b1;
    }
    for (int64_t q = 0; q < gq; ++q) {
      for (due += t.ahead_lines; due >= all_quads; due -= all_quads, ahead += 64)
        _mm_prefetch(ahead, _MM_HINT_T1);
      const __m512i w0 = _mm512_load_si512(v + q * kQuadBytes),
                    w1 = _mm512_load_si512(v + q * kQuadBytes + 64);
      for (int r = 0; r < kRows; ++r) {
        int32_t four;
        std::memcpy(&four, x + r * t.ldq + 4 * q, sizeof four);
        const __m512i xb = _mm512_set1_epi32(four);
        a0[r] = dot_bytes(a0[r], xb, w0);
        a1[r] = dot_bytes(a1[r], xb, w1);
      }
    }
    const float* s = reinterpret_cast<const float*>(v + gq * kQuadBytes);
    const __m512 s0 = _mm512_load_ps(s), s1 = _mm512_load_ps(s + 16);
    for (int r = 0; r < kRows; ++r) {
      const __m512 sx = _mm512_set1_ps(t.sx[r * t.lds + g]);
      lo[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[r]), _mm512_mul_ps(s0, sx), lo[r]);
      hi[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[r]), _mm512_mul_ps(s1, sx), hi[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) store_row(t, r, lo[r], hi[r]);
}

void store_portable(const Tile& t, int rows, const float (*sum)[kPanelRows]) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < t.valid; ++j) {
      float& o = t.out[r * t.ldo + j];
      o = t.accumulate ? o + sum[r][j] : sum[r][j];
    }
}

// What tile_widen computes (its four partial sums a row are one here).
void tile_portable_widen(const Tile& t, int rows) {
  float total[kWidenRows][kPanelRows] = {};
  for (int64_t k0 = 0; k0 < t.depth; k0 += kInt8Group) {
    const int64_t gk = std::min(kInt8Group, t.depth - k0);
    const int8_t* v = t.panel + (k0 / kInt8Group) * kGroupBytes;
    const float* s = reinterpret_cast<const float*>(v + quads(gk) * kQuadBytes);
    for (int r = 0; r < rows; ++r) {
      float acc[kPanelRows] = {};
      for (int64_t kk = 0; kk < gk; ++kk) {
        const float xv = t.x[r * t.ldx + k0 + kk];
        for (int j = 0; j < kPanelRows; ++j)
          acc[j] += xv * static_cast<float>(v[(kk / 4) * kQuadBytes + 4 * j + kk % 4]);
      }
      for (int j = 0; j < kPanelRows; ++j) total[r][j] = std::fma(acc[j], s[j], total[r][j]);
    }
  }
  store_portable(t, rows, total);
}

// What tile_vnni computes, to the bit: the integer sums are exact, and the f32 steps are the same
// operations in the same order.
void tile_portable_quantized(const Tile& t, int rows) {
  float total[kVnniTileRows][kPanelRows] = {};
  for (int64_t k0 = 0; k0 < t.depth; k0 += kInt8Group) {
    const int64_t g = k0 / kInt8Group, gq = quads(std::min(kInt8Group, t.depth - k0));
    const int8_t* v = t.panel + g * kGroupBytes;
    const float* s = reinterpret_cast<const float*>(v + gq * kQuadBytes);
    for (int r = 0; r < rows; ++r) {
      const uint8_t* x = t.xq + r * t.ldq + k0;
      for (int j = 0; j < kPanelRows; ++j) {
        int32_t acc = t.bias[g * kPanelRows + j];
        for (int64_t kk = 0; kk < 4 * gq; ++kk)
          acc += x[kk] * v[(kk / 4) * kQuadBytes + 4 * j + kk % 4];
        total[r][j] = std::fma(static_cast<float>(acc), s[j] * t.sx[r * t.lds + g], total[r][j]);
      }
    }
  }
  store_portable(t, rows, total);
}

using TileFn = void (*)(const Tile&);

template <int... kRows>
constexpr std::array<TileFn, sizeof...(kRows)> widen_tiles(std::integer_sequence<int, kRows...>) {
  return {&tile_widen<kRows + 1>...};
}
template <int... kRows>
constexpr std::array<TileFn, sizeof...(kRows)> vnni_tiles(std::integer_sequence<int, kRows...>) {
  return {&tile_vnni<kRows + 1>...};
}

void run_widen(const Tile& t, int rows, bool avx512) {
  static constexpr auto tiles = widen_tiles(std::make_integer_sequence<int, kWidenRows>{});
  if (avx512)
    tiles[static_cast<size_t>(rows - 1)](t);
  else
    tile_portable_widen(t, rows);
}

void run_vnni(const Tile& t, int rows, bool vnni) {
  static constexpr auto tiles = vnni_tiles(std::make_integer_sequence<int, kVnniTileRows>{});
  if (vnni)
    tiles[static_cast<size_t>(rows - 1)](t);
  else
    tile_portable_quantized(t, rows);
}

// One group of one row of x: scale and bytes (q + 128) as gemm.h says, for every k of the group.
void quantize_group(const float* x, int64_t len, uint8_t* bytes, float& scale) {
  float amax = 0;
  for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[i]));
  scale = amax / 127.0f;
  for (int64_t i = 0; i < len; ++i) {
    const float q = scale > 0 ? std::clamp(std::nearbyint(x[i] / scale), -127.0f, 127.0f) : 0.0f;
    bytes[i] = static_cast<uint8_t>(static_cast<int>(q) + 128);
  }
}

// The same, 16 at a time: the division and the rounding (to nearest even, as nearbyint in the
// default mode) are the same operations, so the bytes are the same.
__attribute__((target("avx512f,avx512bw"))) void quantize_group_avx512(const float* x, int64_t len,
                                                                       uint8_t* bytes,
                                                                       float& scale) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < len; i += 16) {
    const auto mask = static_cast<__mmask16>(len - i >= 16 ? 0xFFFF : (1u << (len - i)) - 1);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, x + i)));
  }
  scale = _mm512_reduce_max_ps(amax) / 127.0f;
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < len; i += 16) {
    const auto mask = static_cast<__mmask16>(len - i >= 16 ? 0xFFFF : (1u << (len - i)) - 1);
    __m512i q = _mm512_setzero_si512();
    if (scale > 0) {
      q = _mm512_cvtps_epi32(_mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + i), s));
      q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
    }
    _mm512_mask_cvtepi32_storeu_epi8(bytes + i, mask, _mm512_add_epi32(q, _mm512_set1_epi32(128)));
  }
}

}  // namespace

size_t panel_bytes(int64_t k) {
  return static_cast<size_t>(bias_offset(k) + int8_groups(k) * kRowScalarsBytes);
}

void quantize_weight_row(const float* row, int64_t k, int8_t* q, float* scales) {
  for (int64_t k0 = 0, g = 0; k0 < k; k0 += kInt8Group, ++g) {
    const int64_t gk = std::min(kInt8Group, k - k0);
    float amax = 0;
    for (int64_t i = 0; i < gk; ++i) amax = std::max(amax, std::fabs(row[k0 + i]));
    const float scale = amax / 127.0f;
    for (int64_t i = 0; i < gk; ++i)
      q[k0 + i] = scale > 0 ? static_cast<int8_t>(
                                  std::clamp(std::nearbyint(row[k0 + i] / scale), -127.0f, 127.0f))
                            : 0;
    scales[g] = scale;
  }
}

void pack_panel(const int8_t* q, int64_t ldq, const float* scales, int64_t lds, int64_t rows,
                int64_t k, void* dst) {
  auto* panel = static_cast<int8_t*>(dst);
  std::memset(panel, 0, panel_bytes(k));
  auto* bias = reinterpret_cast<int32_t*>(panel + bias_offset(k));
  for (int64_t k0 = 0, g = 0; k0 < k; k0 += kInt8Group, ++g) {
    const int64_t gk = std::min(kInt8Group, k - k0);
    int8_t* v = panel + g * kGroupBytes;
    auto* panel_scales = reinterpret_cast<float*>(v + quads(gk) * kQuadBytes);
    for (int64_t j = 0; j < rows; ++j) {
      const int8_t* row = q + j * ldq + k0;
      int32_t sum = 0;
      for (int64_t i = 0; i < gk; ++i) {
        v[(i / 4) * kQuadBytes + 4 * j + i % 4] = row[i];
        sum += row[i];
      }
      panel_scales[j] = scales[j * lds + g];
      bias[g * kPanelRows + j] = -128 * sum;
    }
  }
}

float value_at(const void* packed, int64_t k, int64_t row, int64_t col) {
  const auto* panel =
      static_cast<const int8_t*>(packed) + static_cast<size_t>(row / kPanelRows) * panel_bytes(k);
  const int64_t g = col / kInt8Group, j = row % kPanelRows, i = col % kInt8Group;
  const int8_t* v = panel + g * kGroupBytes;
  const auto* scales = reinterpret_cast<const float*>(
      v + quads(std::min(kInt8Group, k - g * kInt8Group)) * kQuadBytes);
  return static_cast<float>(v[(i / 4) * kQuadBytes + 4 * j + i % 4]) * scales[j];
}

void quantize_rows(const float* x, int64_t rows, int64_t k, int64_t ldx, QuantizedRows& q) {
  q.groups = int8_groups(k);
  // Rows 64 bytes longer than a multiple of 64: a power-of-two stride would put the rows of a tile
  // in the same L1 sets.
  q.ld = (quads(k) * 4 + 63) / 64 * 64 + 64;
  q.bytes.resize(static_cast<size_t>(rows * q.ld));
  q.scales.resize(static_cast<size_t>(rows * q.groups));
  const bool avx512 = avx512_kernels();
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* bytes = q.bytes.data() + r * q.ld;
    for (int64_t k0 = 0, g = 0; k0 < k; k0 += kInt8Group, ++g) {
      const int64_t len = std::min(kInt8Group, k - k0);
      float& scale = q.scales[static_cast<size_t>(r * q.groups + g)];
      if (avx512)
        quantize_group_avx512(x + r * ldx + k0, len, bytes + k0, scale);
      else
        quantize_group(x + r * ldx + k0, len, bytes + k0, scale);
    }
    std::memset(bytes + k, 128, static_cast<size_t>(quads(k) * 4 - k));  // q = 0 in the padding
  }
}

Kernels kernels() {
  return {avx512_kernels(), avx512_kernels() && int8_vnni_kernels()};
}

void run_item(const Item& it, int64_t m, Kernels kernels, QuantizedRows& q) {
  const auto* base = static_cast<const int8_t*>(it.packed);
  const int64_t pb = static_cast<int64_t>(panel_bytes(it.k));
  auto valid = [&](int64_t p) {
    return static_cast<int>(std::min<int64_t>(kPanelRows, it.n - p * kPanelRows));
  };
  // Widening: all of k at once, one tile of every row (fewer than kInt8QuantizedRows rows: nothing
  // to reuse); or, on AVX-512 without VNNI, tiles of kWidenRows rows down the block, the panel
  // found in L1 or L2 after the first (several times faster than the portable quantized kernels).
  if (m < kInt8QuantizedRows || (kernels.avx512 && !kernels.vnni)) {
    for (int64_t p = it.p_begin; p < it.p_end; ++p)
      for (int64_t r = 0; r < it.rows; r += kWidenRows) {
        const Tile t{it.x + (it.row0 + r) * it.k,
                     it.k,
                     nullptr,
                     0,
                     nullptr,
                     0,
                     base + p * pb,
                     nullptr,
                     it.k,
                     it.out + (it.row0 + r) * it.n + p * kPanelRows,
                     it.n,
                     valid(p),
                     false};
        run_widen(t, static_cast<int>(std::min<int64_t>(kWidenRows, it.rows - r)), kernels.avx512);
      }
    return;
  }
  if (q.block != it.block) {
    quantize_rows(it.x + it.row0 * it.k, it.rows, it.k, it.k, q);
    q.block = it.block;
  }
  // Up to kStreamRows rows (decode), each panel goes through whole, streamed as the widening kernel
  // streams it (the first tile asks kPrefetchBytes ahead; the rest find the panel in L1 or L2).
  // More rows sweep slices of it over all the block's tiles, the next slice asked for meanwhile.
  const bool stream = it.rows <= kStreamRows;
  const int64_t slice_k = stream ? it.k : kSliceGroups * kInt8Group;
  const int64_t n_tiles = (it.rows + kVnniTileRows - 1) / kVnniTileRows;
  for (int64_t p = it.p_begin; p < it.p_end; ++p)
    for (int64_t k0 = 0; k0 < it.k; k0 += slice_k) {
      const int64_t g0 = k0 / kInt8Group, depth = std::min(slice_k, it.k - k0);
      const int8_t* slice = base + p * pb + g0 * kGroupBytes;
      const auto* bias =
          reinterpret_cast<const int32_t*>(base + p * pb + bias_offset(it.k)) + g0 * kPanelRows;
      // The next slice follows this one (the last one of a panel: its biases, then the next panel).
      const char* next =
          stream ? reinterpret_cast<const char*>(slice) + kPrefetchBytes
                 : reinterpret_cast<const char*>(slice + int8_groups(depth) * kGroupBytes);
      const int64_t next_lines = (stream ? pb : int8_groups(depth) * kGroupBytes) / 64;
      for (int64_t i = 0; i < n_tiles; ++i) {
        // Tiles of balanced height (8 rows: 4 + 4, not 6 + 2); they share the next slice's
        // prefetch.
        const int64_t r = it.rows * i / n_tiles, r_end = it.rows * (i + 1) / n_tiles;
        const int64_t ahead_from = stream ? 0 : next_lines * i / n_tiles;
        const int64_t ahead_to =
            stream ? (i == 0 ? next_lines : 0) : next_lines * (i + 1) / n_tiles;
        const Tile t{nullptr,
                     0,
                     q.bytes.data() + r * q.ld + k0,
                     q.ld,
                     q.scales.data() + r * q.groups + g0,
                     q.groups,
                     slice,
                     bias,
                     depth,
                     it.out + (it.row0 + r) * it.n + p * kPanelRows,
                     it.n,
                     valid(p),
                     k0 > 0,
                     next + ahead_from * 64,
                     ahead_to - ahead_from};
        run_vnni(t, static_cast<int>(r_end - r), kernels.vnni);
      }
    }
}

}  // namespace tpllama::ops::cpu::int8
