// The CPU's element-wise ops: loops the compiler vectorises, split over the rank's threads when
// large; RMSNorm and SiLU·mul run AVX-512 rows (ops/cpu/avx512.h) where the CPU has them, with the
// portable loop beside each as the reference.
#include "ops/cpu/elementwise.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/random.h"
#include "ops/cpu/avx512.h"
#include "ops/cpu/gemm.h"
#include "ops/weight.h"

namespace tpllama::ops::cpu {

namespace {
// Below this size a parallel region costs more than it saves (measured on stories260K and the
// tiny demo model: 2 threads were 2-3x slower than 1 without it).
constexpr int64_t kParallelElements = 1 << 16;
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

void add_bias(Tensor x, Tensor bias) {
  const int64_t rows = x.size(0), d = x.size(1);
  const float* b = bias.as<float>();
#pragma omp parallel for schedule(static) if (rows * d >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x.as<float>() + r * d;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) xr[i] += b[i];
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
      avx512::rms_norm_avx512(o, xr, w, d, eps);
      continue;
    }
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * w[i];
  }
}

void silu_mul(Tensor out, Tensor gate, Tensor up) {
  if (out.data() != gate.data()) std::memcpy(out.data(), gate.data(), gate.nbytes());
  float* g = out.as<float>();
  const float* u = up.as<float>();
  const int64_t n = gate.numel();
  if (avx512_kernels()) {  // in runs of 1024 elements, so a thread's share is contiguous
    const int64_t runs = (n + 1023) / 1024;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < runs; ++i)
      avx512::silu_mul_avx512(g + i * 1024, u + i * 1024, std::min<int64_t>(1024, n - i * 1024));
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
      const uint64_t z =
          splitmix64(f.stream + static_cast<uint64_t>((f.row0 + r) * f.full_cols + f.col0 + c));
      const float u =
          static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);  // exact, in [-1, 1)
      out[r * cols + c] = std::fma(f.scale, u, f.offset);
    }
  std::fill(out + present * cols, out + rows * cols, 0.0f);
}

}  // namespace tpllama::ops::cpu
