// RMSNorm, RoPE, the embedding, SiLU·mul and the residual add: validate, then dispatch.
#include "ops/elementwise.h"

#include "core/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps) {
  TPLLAMA_CHECK(x.ndim() == 2 && weight.ndim() == 1 && weight.size(0) == x.size(1), "rms_norm: x ",
                x.shape_string(), " weight ", weight.shape_string());
  require_2d("rms_norm", out, "out", x.size(0), x.size(1));
  require_f32("rms_norm", weight, "weight");
  TPLLAMA_CHECK(out.dtype() == x.dtype() || out.data() != x.data(),
                "rms_norm: out aliases x with another dtype");
  if (on_gpu("rms_norm", ctx, {&out, &x, &weight})) TPLLAMA_GPU(rms_norm(ctx, out, x, weight, eps));
  require_cpu_f32("rms_norm", {&out, &x});
  cpu::rms_norm(out, x, weight, eps);
}

void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  require_2d("rope", x, "x", x.size(0), static_cast<int64_t>(n_heads) * head_dim);
  require_2d("rope", cos, "cos", x.size(0), head_dim / 2);
  require_2d("rope", sin, "sin", x.size(0), head_dim / 2);
  require_f32("rope", cos, "cos");
  require_f32("rope", sin, "sin");
  if (on_gpu("rope", ctx, {&x, &cos, &sin})) TPLLAMA_GPU(rope(ctx, x, cos, sin, n_heads, head_dim));
  require_cpu_f32("rope", {&x});
  cpu::rope(x, cos, sin, n_heads, head_dim);
}

void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin) {
  TPLLAMA_CHECK(tokens.dtype() == DType::kI32 && tokens.ndim() == 1, "embedding: tokens ",
                tokens.shape_string());
  TPLLAMA_CHECK(table.ndim() == 2, "embedding: table ", table.shape_string());
  require_2d("embedding", out, "out", tokens.size(0), table.size(1));
  if (on_gpu("embedding", ctx, {&out, &table, &tokens}))
    TPLLAMA_GPU(embedding(ctx, out, table, tokens, vocab_begin));
  require_cpu_f32("embedding", {&out, &table});
  cpu::embedding(out, table, tokens, vocab_begin);
}

void silu_mul(const DeviceContext& ctx, Tensor out, Tensor gate, Tensor up) {
  TPLLAMA_CHECK(
      gate.numel() == up.numel() && gate.dtype() == up.dtype() && out.numel() == gate.numel(),
      "silu_mul: out ", out.shape_string(), " gate ", gate.shape_string(), " up ",
      up.shape_string());
  TPLLAMA_CHECK(out.dtype() == gate.dtype() || out.data() != gate.data(),
                "silu_mul: out aliases gate with another dtype");
  if (on_gpu("silu_mul", ctx, {&out, &gate, &up})) TPLLAMA_GPU(silu_mul(ctx, out, gate, up));
  require_cpu_f32("silu_mul", {&out, &gate, &up});
  cpu::silu_mul(out, gate, up);
}

void add(const DeviceContext& ctx, Tensor x, Tensor y) {
  TPLLAMA_CHECK(x.numel() == y.numel() && x.dtype() == y.dtype(), "add: x ", x.shape_string(),
                " y ", y.shape_string());
  if (on_gpu("add", ctx, {&x, &y})) TPLLAMA_GPU(add(ctx, x, y));
  require_cpu_f32("add", {&x, &y});
  cpu::add(x, y);
}

void add_bias(const DeviceContext& ctx, Tensor x, Tensor bias) {
  TPLLAMA_CHECK(x.ndim() == 2 && bias.ndim() == 1 && bias.size(0) == x.size(1), "add_bias: x ",
                x.shape_string(), " bias ", bias.shape_string());
  require_f32("add_bias", bias, "bias");
  if (on_gpu("add_bias", ctx, {&x, &bias})) TPLLAMA_GPU(add_bias(ctx, x, bias));
  require_cpu_f32("add_bias", {&x});
  cpu::add_bias(x, bias);
}

}  // namespace tpllama::ops
