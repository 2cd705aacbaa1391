// CPU ops (GEMM in gemm.cpp): element-wise ops as plain loops the compiler vectorises, attention
// parallel over (token, head) with OpenMP.
#include "ops/cpu/cpu_ops.h"

// GCC 12 warns inside its own AVX-512 headers (the self-initialised "undefined" vectors).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/gemm.h"

namespace tpllama::ops::cpu {

namespace {
// Below these sizes a parallel region costs more than it saves (measured on stories260K and the
// tiny demo model: 2 threads were 2-3x slower than 1 without these thresholds).
constexpr int64_t kParallelElements = 1 << 16;
constexpr int64_t kParallelWork = 1 << 18;
}  // namespace

void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) {
  const int64_t rows = x.size(0), d = x.size(1);
  const float* w = weight.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.as<float>() + r * d;
    float* o = out.as<float>() + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * w[i];
  }
}

void rope(Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  const int64_t rows = x.size(0);
  const int half = head_dim / 2;
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

void silu_mul(Tensor gate, Tensor up) {
  float* g = gate.as<float>();
  const float* u = up.as<float>();
  const int64_t n = gate.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void add(Tensor x, Tensor y) {
  float* a = x.as<float>();
  const float* b = y.as<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

namespace {

// e^x for x <= 0 (softmax after subtracting the max): 2^n · p(r), x = n·ln2 + r, |r| <= ln2/2, p the
// degree-6 Taylor polynomial (relative error below 2e-7); inputs under -87 give 0.
__attribute__((target("avx512f"))) __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
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

// One (token, head) of attention with AVX-512, head_dim a multiple of 16: scores, softmax and the
// weighted sum of values, reading the sequence's blocks in place.
__attribute__((target("avx512f"))) void attend_avx512(float* o, const float* qh, const KvView& v, int64_t kv_stride,
                                                      int64_t kv_off, const AttentionShape& s, float* scores) {
  const int hd = s.head_dim, bs = s.block_size;
  // Positions block by block: one block-table lookup per block, none per position.
  auto for_each_position = [&](const float* pool, auto&& f) {
    for (int t0 = 0, b = 0; t0 < v.n_ctx; t0 += bs, ++b) {
      const float* row = pool + static_cast<int64_t>(v.blocks[b]) * bs * kv_stride + kv_off;
      const int end = std::min(bs, v.n_ctx - t0);
      for (int j = 0; j < end; ++j, row += kv_stride) f(t0 + j, row);
    }
  };
  float max_score = -INFINITY;
  for_each_position(v.keys, [&](int t, const float* k) {
    __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qh), _mm512_loadu_ps(k));
    for (int i = 16; i < hd; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + i), _mm512_loadu_ps(k + i), acc);
    scores[t] = _mm512_reduce_add_ps(acc) * s.scale;
    max_score = std::max(max_score, scores[t]);
  });
  const __m512 m = _mm512_set1_ps(max_score);
  __m512 total = _mm512_setzero_ps();
  int t = 0;
  for (; t + 16 <= v.n_ctx; t += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(scores + t), m));
    _mm512_storeu_ps(scores + t, e);
    total = _mm512_add_ps(total, e);
  }
  if (t < v.n_ctx) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (v.n_ctx - t)) - 1);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, scores + t), m));
    _mm512_mask_storeu_ps(scores + t, tail, e);
    total = _mm512_add_ps(total, _mm512_maskz_mov_ps(tail, e));
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
  for (int i0 = 0; i0 < hd; i0 += 128) {  // up to 8 accumulators per pass over the values
    const int chunks = std::min(8, (hd - i0) / 16);
    __m512 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_setzero_ps();
    for_each_position(v.values, [&](int u, const float* val) {
      const __m512 p = _mm512_set1_ps(scores[u]);
      for (int c = 0; c < chunks; ++c) acc[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(val + i0 + 16 * c), acc[c]);
    });
    for (int c = 0; c < chunks; ++c) _mm512_storeu_ps(o + i0 + 16 * c, _mm512_mul_ps(acc[c], inv_sum));
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
  const bool avx512 = hd % 16 == 0 && avx512_kernels();
#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<float> scores(static_cast<size_t>(max_ctx));
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t m = 0; m < n_tokens; ++m) {
      for (int h = 0; h < s.n_heads; ++h) {
        const KvView& v = kv[static_cast<size_t>(m)];
        const int bs = s.block_size;
        const float* qh = q.as<float>() + m * q_stride + h * hd;
        const int64_t kv_off = static_cast<int64_t>(h / group) * hd;
        if (avx512) {
          attend_avx512(out.as<float>() + m * q_stride + h * hd, qh, v, kv_stride, kv_off, s, scores.data());
          continue;
        }
        float max_score = -INFINITY;
        for (int t = 0; t < v.n_ctx; ++t) {  // scores = q·k / sqrt(head_dim)
          const int64_t row = static_cast<int64_t>(v.blocks[t / bs]) * bs + t % bs;
          const float* k = v.keys + row * kv_stride + kv_off;
          float dot = 0;
#pragma omp simd reduction(+ : dot)  // lets the compiler reorder the sum into vector lanes
          for (int i = 0; i < hd; ++i) dot += qh[i] * k[i];
          scores[static_cast<size_t>(t)] = dot * s.scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(t)]);
        }
        float sum = 0;  // softmax over the context
        for (int t = 0; t < v.n_ctx; ++t) {
          float e = std::exp(scores[static_cast<size_t>(t)] - max_score);
          scores[static_cast<size_t>(t)] = e;
          sum += e;
        }
        float* o = out.as<float>() + m * q_stride + h * hd;  // weighted sum of values
        std::fill(o, o + hd, 0.0f);
        const float inv_sum = 1.0f / sum;
        for (int t = 0; t < v.n_ctx; ++t) {
          const float p = scores[static_cast<size_t>(t)] * inv_sum;
          const int64_t row = static_cast<int64_t>(v.blocks[t / bs]) * bs + t % bs;
          const float* val = v.values + row * kv_stride + kv_off;
#pragma omp simd
          for (int i = 0; i < hd; ++i) o[i] += p * val[i];
        }
      }
    }
  }
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
