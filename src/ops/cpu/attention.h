// CPU bodies of paged attention and the KV-cache write (ops/attention.h), called after validation.
// f32 queries and outputs; the cache in f32 or bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace tpllama::ops::cpu {

// One token's view of the paged cache: pools of f32 or bf16 elements, its sequence's block table,
// and how many positions it sees.
struct KvView {
  const void* keys = nullptr;
  const void* values = nullptr;
  const int32_t* blocks = nullptr;
  int n_ctx = 0;
  DType dtype = DType::kF32;
};

// The first position a token that sees n_ctx positions sees: max(0, n_ctx - window) under the
// shape's sliding window, else 0.
inline int64_t first_seen(int64_t n_ctx, const AttentionShape& s) {
  return s.window > 0 && n_ctx > s.window ? n_ctx - s.window : 0;
}
inline int first_seen(const KvView& v, const AttentionShape& s) {
  return static_cast<int>(first_seen(int64_t{v.n_ctx}, s));
}

// Each token's attention over its own view: q, out (tokens, n_heads*head_dim). With AVX-512, the
// per-token kernels (runs of kRunTokens or more tokens of one sequence together); elsewhere the
// portable reference.
void attention(Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& s);
// The same for a step's KvBatch (its tables in host memory): one view per token, each block id
// checked against the pool.
void attention(Tensor out, Tensor q, const KvBatch& kv, const AttentionShape& s);

// pool row rows[m] ← row m of k and of v (rounded once to bf16 for a bf16 cache).
void kv_write(Tensor key_pool, Tensor value_pool, Tensor k, Tensor v, Tensor rows);

}  // namespace tpllama::ops::cpu
