// The CPU GEMM behind ops::matmul: out (M, N) = x (M, K) · Wᵀ with W packed once at load into
// panels of 32 rows stored k-major (panel p holds rows 32p..32p+31; element (n, k) sits at
// panel(n / 32)[k * 32 + n % 32]), in f32 or bf16. A 12×32 register tile broadcasts x and streams
// the panel, so decode (M = 1) reads each weight byte once in one contiguous stream per thread and
// prefill is bound by FMA throughput. AVX-512 kernels are chosen at run time; elsewhere a portable
// kernel over the same layout runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tpllama::ops::cpu {

constexpr int64_t kPanelRows = 32;

// Bytes of a packed (n, k) matrix in f32 or bf16 (rows padded to a multiple of 32 with zeros).
size_t packed_bytes(int64_t n, int64_t k, DType dtype);
// Packs row-major w (n, k) into dst (packed_bytes, 64-byte aligned). bf16 rounds to nearest even.
void pack_weight(const float* w, int64_t n, int64_t k, DType dtype, void* dst);
// Element (row, col) of a packed matrix, as f32 (tests, the embedding of a tied head).
float packed_at(const void* packed, int64_t k, DType dtype, int64_t row, int64_t col);

// out (m, n) = x (m, k) · Wᵀ on up to `threads` threads of the rank's pool.
void gemm(float* out, const float* x, int64_t m, const void* packed, DType dtype, int64_t n, int64_t k, int threads);

// One of the products of gemm_multi: out (m, n) = x · Wᵀ, W packed (n, k) in dtype.
struct GemmProduct {
  float* out;
  const void* packed;
  DType dtype;
  int64_t n;
};
constexpr int kMaxProducts = 4;
// Up to kMaxProducts products of one x (m, k) in one parallel pass (the Q, K and V projections;
// gate and up): their panels share one work queue, so the threads meet once at the end instead of
// once per product, and one copy of each block of x serves all of them.
void gemm_multi(const float* x, int64_t m, int64_t k, const GemmProduct* products, int count, int threads);

// AVX-512 F and BW are present: the kernels of gemm, attention and the bandwidth probe use them.
bool cpu_has_avx512();

// Whether gemm and attention run their AVX-512 kernels: the CPU has them and no test forced the
// portable ones.
bool avx512_kernels();
// Which kernel gemm() runs on this CPU: "avx512" or "portable".
const char* gemm_kernel_name();
// Test hook: force the portable kernels (GEMM and attention) even where AVX-512 is present.
void force_portable_gemm(bool on);

}  // namespace tpllama::ops::cpu
