// Weight matrices as the device's matmul reads them: packed once at load from a checkpoint's f32
// rows, or drawn in place from a seeded generator (benchmarks of shapes without files).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tpllama::ops {

// A weight matrix (rows N, cols K) in the layout the device's matmul reads (on the CPU: panels of
// 32 rows, k-major, in f32 or bf16; see ops/cpu/gemm.h). Made once at load by pack_weight; the
// memory belongs to whoever passed `dst`.
struct Weight {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  size_t nbytes = 0;
  bool empty() const { return data == nullptr; }
};

// Bytes pack_weight needs for a (rows, cols) matrix held as dtype (f32 or bf16).
size_t weight_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype);
// Packs w (rows, cols), f32 row-major as stored in checkpoints, into dst (weight_bytes, 64-byte
// aligned) as dtype.
Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst);
// Element (row, col) of a packed weight, as f32.
float weight_at(const Weight& w, int64_t row, int64_t col);

// Seeded uniform values, for benchmark weights of shapes that have no files (--random-weights):
// element (r, c) of a slice starting at (row0, col0) of a tensor full_cols wide is
// fma(scale, u, offset), u = (splitmix64(stream + (row0 + r) · full_cols + col0 + c) >> 11) · 2^-52 − 1
// (uniform in [-1, 1)); rows from `present` on are 0 (the padding of the last vocab shard). The
// same bits on every device, so a GPU draws its weights where they live and holds the CPU's model.
struct UniformFill {
  uint64_t stream = 0;
  int64_t full_cols = 0;
  int64_t row0 = 0;
  int64_t col0 = 0;
  int64_t present = 0;
  float scale = 1;
  float offset = 0;
};
uint64_t splitmix64(uint64_t z);
// out (rows, cols) or (rows), f32, filled as above.
void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f);
// A (rows, cols) weight filled as above, held as dtype in dst (weight_bytes): what pack_weight
// would make of the same values, drawn on the device.
Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype, const UniformFill& f,
                           void* dst);

}  // namespace tpllama::ops
