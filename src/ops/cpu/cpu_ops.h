// CPU implementations of the ops; called only from ops.cpp after validation.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace tpllama::ops {

// One token's view of the paged cache on the CPU (ops::attention builds these from its KvBatch):
// pools of f32 or bf16 elements.
struct KvView {
  const void* keys = nullptr;
  const void* values = nullptr;
  const int32_t* blocks = nullptr;
  int n_ctx = 0;
  DType dtype = DType::kF32;
};

}  // namespace tpllama::ops

namespace tpllama::ops::cpu {

void rms_norm(Tensor out, Tensor x, Tensor weight, float eps);
void rope(Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);
void embedding(Tensor out, Tensor table, Tensor tokens, int vocab_begin);
void silu_mul(Tensor gate, Tensor up);
void add(Tensor x, Tensor y);
// out (rows, cols) f32 as ops::UniformFill defines.
void fill_uniform(float* out, int64_t rows, int64_t cols, const UniformFill& f);
void attention(Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& shape);
void argmax_rows(Tensor index, Tensor value, Tensor logits);

}  // namespace tpllama::ops::cpu
