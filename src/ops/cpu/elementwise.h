// CPU bodies of the element-wise ops (ops/elementwise.h and the weights' seeded fill), called
// after validation: f32 activations, row-major.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/weight.h"

namespace tpllama::ops::cpu {

void rms_norm(Tensor out, Tensor x, Tensor weight, float eps);
void rope(Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);
void embedding(Tensor out, Tensor table, Tensor tokens, int vocab_begin);
// out = silu(gate) * up; out may alias gate.
void silu_mul(Tensor out, Tensor gate, Tensor up);
void add(Tensor x, Tensor y);
// x (M, D) += bias (D) on every row.
void add_bias(Tensor x, Tensor bias);
// out (rows, cols) f32 as ops::UniformFill defines.
void fill_uniform(float* out, int64_t rows, int64_t cols, const UniformFill& f);

}  // namespace tpllama::ops::cpu
