// Device-free op API: each op validates shapes and dtypes once, then dispatches on the tensors'
// device. All activations are row-major (tokens, features).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device.h"
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

// out (M, N) = x (M, K) · wᵀ.
void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w);

// out (M, D) = x / sqrt(mean(x²) + eps) * weight (D). out may alias x.
void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps);

// Rotate-half RoPE in place on x (M, n_heads*head_dim) with per-token cos/sin (M, head_dim/2).
void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);

// out (M, D): row m = table[tokens[m] - vocab_begin] when this rank holds that row, else zeros
// (vocab-parallel embedding; the TP all-reduce completes it).
void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin);

// gate (M, H) ← silu(gate) * up.
void silu_mul(const DeviceContext& ctx, Tensor gate, Tensor up);

// x += y, same shape.
void add(const DeviceContext& ctx, Tensor x, Tensor y);

// Where one token's keys and values live in the paged cache: the layer's key and value pools,
// whose row (block * block_size + offset) holds one position (n_kv_heads*head_dim values), and the
// sequence's block table.
struct KvView {
  const float* keys = nullptr;    // device memory on a GPU
  const float* values = nullptr;
  const int32_t* blocks = nullptr;
  int n_ctx = 0;  // attend to positions [0, n_ctx): causal, the token's own position included
};

struct AttentionShape {
  int n_heads = 0;     // query heads on this rank
  int n_kv_heads = 0;  // kv heads on this rank
  int head_dim = 0;
  float scale = 0;     // usually 1/sqrt(head_dim)
  int block_size = 0;  // positions per KV block
};

// Grouped-query attention of each token over its own sequence's cache.
// q, out: (M, n_heads*head_dim); kv.size() == M.
void attention(const DeviceContext& ctx, Tensor out, Tensor q, const std::vector<KvView>& kv,
               const AttentionShape& shape);

// index[r], value[r] = the largest logit of row r and its column (ties to the lowest column), over
// logits (rows, cols) f32.
void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits);

}  // namespace tpllama::ops
