// Shape and dtype validation for every op, then dispatch on the context's device. The CPU takes
// f32 activations; the GPU f32 or bf16 (one dtype per op). A build without CUDA names the op that
// was asked to run on a GPU.
#include "ops/ops.h"

#include <initializer_list>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {
namespace {

void require_f32(const char* op, const Tensor& t, const char* what) {
  TPLLAMA_CHECK(t.dtype() == DType::kF32, op, ": ", what, " must be f32, got ", dtype_name(t.dtype()));
}

void require_2d(const char* op, const Tensor& t, const char* what, int64_t rows, int64_t cols) {
  TPLLAMA_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, op, ": ", what, " has shape ",
                t.shape_string(), ", expected [", rows, ", ", cols, "]");
}

// True when the op runs on the GPU; then every tensor must live there too.
bool on_gpu(const char* op, const DeviceContext& ctx, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    TPLLAMA_CHECK(t->device() == ctx.device, op, ": a tensor on ", device_name(t->device()), " given to an op on ",
                  device_name(ctx.device));
  if (ctx.device == Device::kCpu) return false;
#ifndef TPLLAMA_HAVE_CUDA
  fail("op ", op, " was asked to run on ", device_name(ctx.device),
       " but this build has no CUDA (configure with -DTPLLAMA_CUDA=ON where nvcc is installed)");
#endif
  return true;
}

// The activations of a CPU op are f32.
void require_cpu_f32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) require_f32(op, *t, "an activation on the CPU");
}

}  // namespace

#ifdef TPLLAMA_HAVE_CUDA
#define TPLLAMA_GPU(call) return cuda::call
#else
#define TPLLAMA_GPU(call) fail("unreachable: no CUDA in this build")
#endif

size_t weight_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype) {
  if (on_gpu("weight_bytes", ctx, {})) TPLLAMA_GPU(weight_bytes(rows, cols, dtype));
  return cpu::packed_bytes(rows, cols, dtype);
}

Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst) {
  TPLLAMA_CHECK(w.ndim() == 2, "pack_weight: w ", w.shape_string());
  require_f32("pack_weight", w, "w");
  TPLLAMA_CHECK(w.device() == Device::kCpu, "pack_weight: w must be host memory (as read from the checkpoint)");
  TPLLAMA_CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "pack_weight: destination not 64-byte aligned");
  if (on_gpu("pack_weight", ctx, {})) TPLLAMA_GPU(pack_weight(ctx, w, dtype, dst));
  cpu::pack_weight(w.as<float>(), w.size(0), w.size(1), dtype, dst);
  return Weight{dst, w.size(0), w.size(1), dtype, Device::kCpu, cpu::packed_bytes(w.size(0), w.size(1), dtype)};
}

float weight_at(const Weight& w, int64_t row, int64_t col) {
  TPLLAMA_CHECK(row >= 0 && row < w.rows && col >= 0 && col < w.cols, "weight_at(", row, ", ", col, ") of [",
                w.rows, ", ", w.cols, "]");
  DeviceContext where;
  where.device = w.device;
  if (on_gpu("weight_at", where, {})) TPLLAMA_GPU(weight_at(w, row, col));
  return cpu::packed_at(w.data, w.cols, w.dtype, row, col);
}

void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w) {
  TPLLAMA_CHECK(x.ndim() == 2 && !w.empty(), "matmul: x ", x.shape_string(), " w [", w.rows, ", ", w.cols, "]");
  require_2d("matmul", out, "out", x.size(0), w.rows);
  TPLLAMA_CHECK(x.size(1) == w.cols, "matmul: x ", x.shape_string(), " vs w [", w.rows, ", ", w.cols, "]");
  TPLLAMA_CHECK(w.device == ctx.device, "matmul: weight on ", device_name(w.device), ", op on ",
                device_name(ctx.device));
  if (on_gpu("matmul", ctx, {&out, &x})) TPLLAMA_GPU(matmul(ctx, out, x, w));
  require_cpu_f32("matmul", {&out, &x});
  cpu::gemm(out.as<float>(), x.as<float>(), x.size(0), w.data, w.dtype, w.rows, w.cols, ctx.threads);
}

void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps) {
  TPLLAMA_CHECK(x.ndim() == 2 && weight.ndim() == 1 && weight.size(0) == x.size(1), "rms_norm: x ",
                x.shape_string(), " weight ", weight.shape_string());
  require_2d("rms_norm", out, "out", x.size(0), x.size(1));
  require_f32("rms_norm", weight, "weight");
  TPLLAMA_CHECK(out.dtype() == x.dtype(), "rms_norm: out ", dtype_name(out.dtype()), " vs x ", dtype_name(x.dtype()));
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
  if (on_gpu("embedding", ctx, {&out, &table, &tokens})) TPLLAMA_GPU(embedding(ctx, out, table, tokens, vocab_begin));
  require_cpu_f32("embedding", {&out, &table});
  cpu::embedding(out, table, tokens, vocab_begin);
}

void silu_mul(const DeviceContext& ctx, Tensor gate, Tensor up) {
  TPLLAMA_CHECK(gate.numel() == up.numel() && gate.dtype() == up.dtype(), "silu_mul: gate ", gate.shape_string(),
                " up ", up.shape_string());
  if (on_gpu("silu_mul", ctx, {&gate, &up})) TPLLAMA_GPU(silu_mul(ctx, gate, up));
  require_cpu_f32("silu_mul", {&gate, &up});
  cpu::silu_mul(gate, up);
}

void add(const DeviceContext& ctx, Tensor x, Tensor y) {
  TPLLAMA_CHECK(x.numel() == y.numel() && x.dtype() == y.dtype(), "add: x ", x.shape_string(), " y ",
                y.shape_string());
  if (on_gpu("add", ctx, {&x, &y})) TPLLAMA_GPU(add(ctx, x, y));
  require_cpu_f32("add", {&x, &y});
  cpu::add(x, y);
}

void attention(const DeviceContext& ctx, Tensor out, Tensor q, const std::vector<KvView>& kv,
               const AttentionShape& s) {
  TPLLAMA_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "attention: ", s.n_heads,
                " heads over ", s.n_kv_heads, " kv heads");
  require_2d("attention", q, "q", static_cast<int64_t>(kv.size()), static_cast<int64_t>(s.n_heads) * s.head_dim);
  require_2d("attention", out, "out", q.size(0), q.size(1));
  TPLLAMA_CHECK(out.dtype() == q.dtype(), "attention: out ", dtype_name(out.dtype()), " vs q ", dtype_name(q.dtype()));
  TPLLAMA_CHECK(s.block_size > 0, "attention: block size ", s.block_size);
  for (const KvView& v : kv) TPLLAMA_CHECK(v.n_ctx > 0 && v.keys && v.values && v.blocks, "attention: empty context");
  if (on_gpu("attention", ctx, {&out, &q})) TPLLAMA_GPU(attention(ctx, out, q, kv, s));
  require_cpu_f32("attention", {&out, &q});
  cpu::attention(out, q, kv, s);
}

void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "argmax_rows: logits ", logits.shape_string());
  TPLLAMA_CHECK(index.dtype() == DType::kI32 && index.ndim() == 1 && index.size(0) == logits.size(0),
                "argmax_rows: index ", index.shape_string());
  TPLLAMA_CHECK(value.dtype() == DType::kF32 && value.ndim() == 1 && value.size(0) == logits.size(0),
                "argmax_rows: value ", value.shape_string());
  if (on_gpu("argmax_rows", ctx, {&index, &value, &logits})) TPLLAMA_GPU(argmax_rows(ctx, index, value, logits));
  cpu::argmax_rows(index, value, logits);
}

}  // namespace tpllama::ops
