// Shape and dtype validation for every op, then dispatch to the device implementation. A build
// without CUDA names the op that was asked to run on a GPU.
#include "ops/ops.h"

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"

namespace tpllama::ops {
namespace {

void require_f32(const char* op, const Tensor& t, const char* what) {
  TPLLAMA_CHECK(t.dtype() == DType::kF32, op, ": ", what, " must be f32, got ", dtype_name(t.dtype()));
}

void require_cpu(const char* op, const DeviceContext& ctx) {
  if (ctx.device != Device::kCpu)
    fail("op ", op, " was asked to run on ", device_name(ctx.device),
         " but this build has only the CPU implementation");
}

void require_2d(const char* op, const Tensor& t, const char* what, int64_t rows, int64_t cols) {
  TPLLAMA_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, op, ": ", what, " has shape ",
                t.shape_string(), ", expected [", rows, ", ", cols, "]");
}

}  // namespace

size_t weight_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype) {
  require_cpu("weight_bytes", ctx);
  return cpu::packed_bytes(rows, cols, dtype);
}

Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst) {
  TPLLAMA_CHECK(w.ndim() == 2, "pack_weight: w ", w.shape_string());
  require_f32("pack_weight", w, "w");
  require_cpu("pack_weight", ctx);
  TPLLAMA_CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "pack_weight: destination not 64-byte aligned");
  cpu::pack_weight(w.as<float>(), w.size(0), w.size(1), dtype, dst);
  return Weight{dst, w.size(0), w.size(1), dtype, Device::kCpu, cpu::packed_bytes(w.size(0), w.size(1), dtype)};
}

float weight_at(const Weight& w, int64_t row, int64_t col) {
  TPLLAMA_CHECK(row >= 0 && row < w.rows && col >= 0 && col < w.cols, "weight_at(", row, ", ", col, ") of [",
                w.rows, ", ", w.cols, "]");
  return cpu::packed_at(w.data, w.cols, w.dtype, row, col);
}

void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w) {
  TPLLAMA_CHECK(x.ndim() == 2 && !w.empty(), "matmul: x ", x.shape_string(), " w [", w.rows, ", ", w.cols, "]");
  require_2d("matmul", out, "out", x.size(0), w.rows);
  TPLLAMA_CHECK(x.size(1) == w.cols, "matmul: x ", x.shape_string(), " vs w [", w.rows, ", ", w.cols, "]");
  require_f32("matmul", x, "x");
  require_f32("matmul", out, "out");
  require_cpu("matmul", ctx);
  TPLLAMA_CHECK(w.device == Device::kCpu, "matmul: weight on ", device_name(w.device));
  cpu::gemm(out.as<float>(), x.as<float>(), x.size(0), w.data, w.dtype, w.rows, w.cols, ctx.threads);
}

void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps) {
  TPLLAMA_CHECK(x.ndim() == 2 && weight.ndim() == 1 && weight.size(0) == x.size(1), "rms_norm: x ",
                x.shape_string(), " weight ", weight.shape_string());
  require_2d("rms_norm", out, "out", x.size(0), x.size(1));
  require_cpu("rms_norm", ctx);
  cpu::rms_norm(out, x, weight, eps);
}

void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  require_2d("rope", x, "x", x.size(0), static_cast<int64_t>(n_heads) * head_dim);
  require_2d("rope", cos, "cos", x.size(0), head_dim / 2);
  require_2d("rope", sin, "sin", x.size(0), head_dim / 2);
  require_cpu("rope", ctx);
  cpu::rope(x, cos, sin, n_heads, head_dim);
}

void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin) {
  TPLLAMA_CHECK(tokens.dtype() == DType::kI32 && tokens.ndim() == 1, "embedding: tokens ",
                tokens.shape_string());
  TPLLAMA_CHECK(table.ndim() == 2, "embedding: table ", table.shape_string());
  require_2d("embedding", out, "out", tokens.size(0), table.size(1));
  require_cpu("embedding", ctx);
  cpu::embedding(out, table, tokens, vocab_begin);
}

void silu_mul(const DeviceContext& ctx, Tensor gate, Tensor up) {
  TPLLAMA_CHECK(gate.numel() == up.numel(), "silu_mul: gate ", gate.shape_string(), " up ", up.shape_string());
  require_cpu("silu_mul", ctx);
  cpu::silu_mul(gate, up);
}

void add(const DeviceContext& ctx, Tensor x, Tensor y) {
  TPLLAMA_CHECK(x.numel() == y.numel(), "add: x ", x.shape_string(), " y ", y.shape_string());
  require_cpu("add", ctx);
  cpu::add(x, y);
}

void attention(const DeviceContext& ctx, Tensor out, Tensor q, const std::vector<KvView>& kv,
               const AttentionShape& s) {
  TPLLAMA_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "attention: ", s.n_heads,
                " heads over ", s.n_kv_heads, " kv heads");
  require_2d("attention", q, "q", static_cast<int64_t>(kv.size()), static_cast<int64_t>(s.n_heads) * s.head_dim);
  require_2d("attention", out, "out", q.size(0), q.size(1));
  TPLLAMA_CHECK(s.block_size > 0, "attention: block size ", s.block_size);
  for (const KvView& v : kv) TPLLAMA_CHECK(v.n_ctx > 0 && v.keys && v.values && v.blocks, "attention: empty context");
  require_cpu("attention", ctx);
  cpu::attention(out, q, kv, s);
}

}  // namespace tpllama::ops
