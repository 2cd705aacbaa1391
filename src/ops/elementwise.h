// The per-row and per-element ops of a layer: RMSNorm, RoPE, the embedding lookup, SiLU·mul and
// the residual add. All activations are row-major (tokens, features).
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"

namespace tpllama::ops {

// out (M, D) = x / sqrt(mean(x²) + eps) * weight (D). out may alias x. On a GPU out may have
// another dtype than x (a GEMM's input).
void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps);

// Rotate-half RoPE in place on x (M, n_heads*head_dim) with per-token cos/sin (M, head_dim/2).
void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);

// out (M, D): row m = table[tokens[m] - vocab_begin] when this rank holds that row, else zeros
// (vocab-parallel embedding; the TP all-reduce completes it).
void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin);

// out (M, H) = silu(gate) * up. out may alias gate; on a GPU it may have another dtype.
void silu_mul(const DeviceContext& ctx, Tensor out, Tensor gate, Tensor up);

// x += y, same shape.
void add(const DeviceContext& ctx, Tensor x, Tensor y);

// x (M, D) += bias (D) on every row: a projection's bias (Qwen2's q, k and v).
void add_bias(const DeviceContext& ctx, Tensor x, Tensor bias);

}  // namespace tpllama::ops
