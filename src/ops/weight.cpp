// Packing weights for the device's matmul, and the seeded fills of random weights.
#include "ops/weight.h"

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/gemm.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

size_t weight_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype) {
  if (on_gpu("weight_bytes", ctx, {})) TPLLAMA_GPU(weight_bytes(rows, cols, dtype));
  return cpu::packed_bytes(rows, cols, dtype);
}

Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst) {
  TPLLAMA_CHECK(w.ndim() == 2, "pack_weight: w ", w.shape_string());
  require_f32("pack_weight", w, "w");
  TPLLAMA_CHECK(w.device() == Device::kCpu,
                "pack_weight: w must be host memory (as read from the checkpoint)");
  TPLLAMA_CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0,
                "pack_weight: destination not 64-byte aligned");
  if (on_gpu("pack_weight", ctx, {})) TPLLAMA_GPU(pack_weight(ctx, w, dtype, dst));
  cpu::pack_weight(w.as<float>(), w.size(0), w.size(1), dtype, dst);
  return Weight{dst,   w.size(0),    w.size(1),
                dtype, Device::kCpu, cpu::packed_bytes(w.size(0), w.size(1), dtype)};
}

int64_t int8_group_size() {
  return cpu::kInt8Group;
}
int64_t int8_scale_cols(int64_t cols) {
  return cpu::int8_groups(cols);
}

void quantize_int8_weight(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales) {
  cpu::quantize_int8(w, rows, cols, q, scales);
}

Weight pack_int8_weight(const DeviceContext& ctx, const int8_t* q, const float* scales,
                        int64_t rows, int64_t cols, void* dst) {
  TPLLAMA_CHECK(ctx.device == Device::kCpu,
                "pack_int8_weight: int8 weights are held on the CPU only");
  TPLLAMA_CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0,
                "pack_int8_weight: destination not 64-byte aligned");
  cpu::pack_int8(q, scales, rows, cols, dst);
  return Weight{dst,        rows,         cols,
                DType::kI8, Device::kCpu, cpu::packed_bytes(rows, cols, DType::kI8)};
}

void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f) {
  TPLLAMA_CHECK(out.ndim() == 1 || out.ndim() == 2, "fill_uniform: out ", out.shape_string());
  require_f32("fill_uniform", out, "out");
  const int64_t rows = out.size(0), cols = out.ndim() == 2 ? out.size(1) : 1;
  if (on_gpu("fill_uniform", ctx, {&out})) TPLLAMA_GPU(fill_uniform(ctx, out, f));
  cpu::fill_uniform(out.as<float>(), rows, cols, f);
}

Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype,
                           const UniformFill& f, void* dst) {
  TPLLAMA_CHECK(rows > 0 && cols > 0, "fill_weight_uniform: [", rows, ", ", cols, "]");
  if (on_gpu("fill_weight_uniform", ctx, {}))
    TPLLAMA_GPU(fill_weight_uniform(ctx, rows, cols, dtype, f, dst));
  std::vector<float> values(static_cast<size_t>(rows * cols));
  cpu::fill_uniform(values.data(), rows, cols, f);
  return pack_weight(ctx, Tensor(values.data(), DType::kF32, {rows, cols}), dtype, dst);
}

float weight_at(const Weight& w, int64_t row, int64_t col) {
  TPLLAMA_CHECK(row >= 0 && row < w.rows && col >= 0 && col < w.cols, "weight_at(", row, ", ", col,
                ") of [", w.rows, ", ", w.cols, "]");
  DeviceContext where;
  where.device = w.device;
  if (on_gpu("weight_at", where, {})) TPLLAMA_GPU(weight_at(w, row, col));
  return cpu::packed_at(w.data, w.cols, w.dtype, row, col);
}

}  // namespace tpllama::ops
