// GPU implementations of the ops, called only from ops.cpp after validation. Activations are f32
// or bf16 (all tensors of one op alike), weights f32 or bf16, norms' weights and RoPE tables f32;
// every pointer is device memory except the block tables inside KvView, which are staged through
// the context's scratch.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tpllama::ops::cuda {

size_t weight_bytes(int64_t rows, int64_t cols, DType dtype);
// w: host f32 (rows, cols); dst: device memory of weight_bytes.
Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst);
float weight_at(const Weight& w, int64_t row, int64_t col);
void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w);
void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps);
void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);
void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin);
void silu_mul(const DeviceContext& ctx, Tensor gate, Tensor up);
void add(const DeviceContext& ctx, Tensor x, Tensor y);
void attention(const DeviceContext& ctx, Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& s);
void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits);

}  // namespace tpllama::ops::cuda
