// The CPU GEMM behind ops::matmul: out (M, N) = x (M, K) · Wᵀ with W packed once at load into
// panels of 32 rows (panel p holds rows 32p..32p+31; rows past N are zeros), so decode (M = 1)
// reads each weight byte once in one contiguous stream per thread and prefill is bound by the
// arithmetic. AVX-512 kernels are chosen at run time; elsewhere portable kernels over the same
// layouts compute the same thing.
//
// f32 and bf16: panel p is k-major, element (n, k) at panel(n / 32)[k * 32 + n % 32]. A 12×32
// register tile broadcasts x and streams the panel.
//
// int8 (DType::kI8): symmetric, one f32 scale per row per group of kInt8Group consecutive k (the
// last group of a row is shorter when K is not a multiple): scale = max|w| / 127 over the group,
// q = w / scale rounded to nearest (ties to even) and clamped to [-127, 127]; an all-zero group has
// scale 0 and q 0. K is padded to a multiple of 4 (kp) with q = 0. Each panel is one contiguous run
// of 32·kp + 256·ng bytes (ng groups), a multiple of 128, so every panel starts 64-byte aligned:
//   for each group g: its values, 4 k × 32 rows at a time (128 bytes: row j's q at k..k+3 are the
//                     4 bytes at 4j, the operand layout of VNNI's vpdpbusd), then its 32 scales
//                     (f32, row order);
//   then for each group g: 32 int32 biases, -128 · Σ q over the group (one per row), the start
//                     value of a VNNI accumulator (activations go in as bytes q_x + 128).
// Fewer than kInt8QuantizedRows rows of x widen the weights to f32 and multiply x as it is (decode
// is bound by reading the weights; the widening hides behind it). More rows quantize each row of x
// per group the same way (its own scale per group) and multiply bytes with VNNI, scaling each
// group's exact integer dot product by s_w · s_x into f32. packed_at reads values and scales only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tpllama::ops::cpu {

constexpr int64_t kPanelRows = 32;
// k per int8 scale. Measured with tests/bench/gemm_int8_bench.cpp (the 110m products, two
// threads): int8 time of all four at m = 1 / 4 / 32 / 128, and the mean error relative to the
// outputs' RMS at m = 1, k = 768, on Gaussian weights with one value in 200 eight times larger:
//   32: 725 / 851 / 2545 / 9134 us, 6.0e-3      64: 587 / 672 / 2354 / 7744 us, 8.1e-3
//   128: 525 / 585 / 1787 / 6445 us, 9.8e-3     256: 574 / 608 / 1696 / 6058 us, 1.28e-2
// 128 is the fastest at one row (decode, the case bound by reading the weights) and within 6% of
// 256 at more rows, with three quarters of its error.
constexpr int64_t kInt8Group = 128;
// From this many rows of x on, int8 products quantize x and run the VNNI kernels (see above).
// Measured on the same products, widening against VNNI: 1 row 490 against 520 us, 2 rows 512
// against 590, 3 rows 578 against 594; at 4 rows VNNI is 25% faster (widening runs out of
// registers).
constexpr int64_t kInt8QuantizedRows = 4;

// Bytes of a packed (n, k) matrix (rows padded to a multiple of 32 with zeros; int8 as above).
size_t packed_bytes(int64_t n, int64_t k, DType dtype);
// Packs row-major w (n, k), finite, into dst (packed_bytes, 64-byte aligned) as f32, bf16 (rounded
// to nearest even) or int8 (quantized as above).
void pack_weight(const float* w, int64_t n, int64_t k, DType dtype, void* dst);
// Scales per row of an int8 matrix k wide: one per group of kInt8Group columns.
constexpr int64_t int8_groups(int64_t k) {
  return (k + kInt8Group - 1) / kInt8Group;
}
// The int8 quantization above of row-major w (n, k), finite: q (n, k) and scales (n,
// int8_groups(k)), both row-major. What pack_weight holds as int8, and what an int8 checkpoint
// stores.
void quantize_int8(const float* w, int64_t n, int64_t k, int8_t* q, float* scales);
// Packs quantized weights (as quantize_int8 writes them) into dst (packed_bytes(n, k, kI8), 64-byte
// aligned): of quantize_int8(w), byte for byte what pack_weight(w, kI8) writes.
void pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k, void* dst);
// Element (row, col) of a packed matrix, as f32 (int8: q × scale, the value the product uses).
float packed_at(const void* packed, int64_t k, DType dtype, int64_t row, int64_t col);

// out (m, n) = x (m, k) · Wᵀ on up to `threads` threads of the rank's pool.
void gemm(float* out, const float* x, int64_t m, const void* packed, DType dtype, int64_t n,
          int64_t k, int threads);

// One of the products of gemm_multi: out (m, n) = x · Wᵀ, W packed (n, k) in dtype.
struct GemmProduct {
  float* out;
  const void* packed;
  DType dtype;
  int64_t n;
};
constexpr int kMaxProducts = 4;
// Up to kMaxProducts products of one x (m, k) in one parallel pass (the Q, K and V projections;
// gate and up), of any mix of dtypes: their panels share one work queue, so the threads meet once
// at the end instead of once per product, and one copy of each block of x serves all of them.
void gemm_multi(const float* x, int64_t m, int64_t k, const GemmProduct* products, int count,
                int threads);

// AVX-512 F and BW are present: the kernels of gemm, attention and the bandwidth probe use them.
bool cpu_has_avx512();
// AVX-512 VNNI is present as well (the int8 kernels for kInt8QuantizedRows rows and more).
bool cpu_has_avx512_vnni();

// Whether gemm and attention run their AVX-512 kernels: the CPU has them and no test forced the
// portable ones.
bool avx512_kernels();
// Which kernel gemm() runs on this CPU: "avx512" or "portable".
const char* gemm_kernel_name();
// Whether int8 products of kInt8QuantizedRows rows and more run the VNNI kernels: AVX-512 VNNI is
// present and no test turned it off. AVX-512 without VNNI widens at every height instead.
bool int8_vnni_kernels();
// Which kernel an int8 product of m rows of x runs: "avx512-widen", "avx512-vnni",
// "portable-widen" or "portable-quantized" (the last two compute what the first two do).
const char* int8_kernel_name(int64_t m);
// Test hook: force the portable kernels (GEMM and attention) even where AVX-512 is present.
void force_portable_gemm(bool on);
// Test and benchmark hook: run int8 products as on an AVX-512 machine without VNNI.
void force_no_vnni(bool on);

}  // namespace tpllama::ops::cpu
