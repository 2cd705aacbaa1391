// CPU ops (GEMM in gemm.cpp): element-wise ops as plain loops the compiler vectorises, attention
// parallel over (token, head) with OpenMP.
#include "ops/cpu/cpu_ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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
        float max_score = -INFINITY;
        for (int t = 0; t < v.n_ctx; ++t) {  // scores = q·k / sqrt(head_dim)
          const int64_t row = static_cast<int64_t>(v.blocks[t / bs]) * bs + t % bs;
          const float* k = v.keys + row * kv_stride + kv_off;
          float dot = 0;
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
          for (int i = 0; i < hd; ++i) o[i] += p * val[i];
        }
      }
    }
  }
}

}  // namespace tpllama::ops::cpu
