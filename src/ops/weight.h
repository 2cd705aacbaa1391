// Weight matrices as the device's matmul reads them: packed once at load from a checkpoint's f32
// rows, or drawn in place from a seeded generator (benchmarks of shapes without files).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device_context.h"
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
// The int8 weights of an int8 checkpoint (written by `convert`/`shard --dtype int8`): row-major q
// (rows, cols) and f32 scales (rows, int8_scale_cols(cols)), w = q × scale per group of
// int8_group_size() columns. quantize_int8_weight makes them from f32 rows exactly as
// pack_weight(kI8) quantizes; pack_int8_weight packs them (CPU only) into dst (weight_bytes(kI8)),
// byte for byte what pack_weight(kI8) makes of the f32 rows they came from.
int64_t int8_group_size();
int64_t int8_scale_cols(int64_t cols);
void quantize_int8_weight(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales);
Weight pack_int8_weight(const DeviceContext& ctx, const int8_t* q, const float* scales,
                        int64_t rows, int64_t cols, void* dst);
// Element (row, col) of a packed weight, as f32.
float weight_at(const Weight& w, int64_t row, int64_t col);

// Seeded uniform values, for benchmark weights of shapes that have no files (--random-weights):
// element (r, c) of a slice starting at (row0, col0) of a tensor full_cols wide is
// fma(scale, u, offset), u = (splitmix64(stream + (row0 + r) · full_cols + col0 + c) >> 11) · 2^-52
// − 1 (uniform in [-1, 1)); rows from `present` on are 0 (the padding of the last vocab shard). The
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
// out (rows, cols) or (rows), f32, filled as above.
void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f);
// A (rows, cols) weight filled as above, held as dtype in dst (weight_bytes): what pack_weight
// would make of the same values, drawn on the device.
Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype,
                           const UniformFill& f, void* dst);

}  // namespace tpllama::ops
