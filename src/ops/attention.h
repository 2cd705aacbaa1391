// Paged attention: each token attends over its own sequence's keys and values, read through the
// sequence's block table; and the write of a step's keys and values into the cache.
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"

namespace tpllama::ops {

// Where the tokens of one step find their keys and values in the paged cache. The layer's key and
// value pools hold one position per row (block * block_size + offset) of n_kv_heads*head_dim
// values; the step's sequences each have a block table, and every token names its sequence and
// how many positions it sees. All tensors live on the op's device.
struct KvBatch {
  Tensor keys;    // (pool_rows, kv_dim) f32
  Tensor values;  // (pool_rows, kv_dim) f32
  Tensor tables;  // (n_seqs, max_blocks) i32: block ids of each sequence of the step
  Tensor seq;     // (tokens) i32: the token's row of tables
  Tensor n_ctx;   // (tokens) i32: attend to positions [0, n_ctx): causal, the token's own included
  int max_ctx = 0;  // the largest n_ctx: lets a GPU split long contexts along the sequence
  // Optional: the tokens as maximal runs of one sequence at consecutive positions, (n_runs, 2) i32
  // [first token, length], and the longest: a GPU reads each key once per several queries of a
  // run (prefill).
  Tensor runs;
  int max_run = 0;
};

struct AttentionShape {
  int n_heads = 0;     // query heads on this rank
  int n_kv_heads = 0;  // kv heads on this rank
  int head_dim = 0;
  float scale = 0;     // usually 1/sqrt(head_dim)
  int block_size = 0;  // positions per KV block
  // Sliding-window attention (Mistral): a token at position p sees positions [p - window + 1, p],
  // window of them, its own included; 0: every earlier position.
  int window = 0;
};

// Grouped-query attention of each token over its own sequence's cache.
// q, out: (M, n_heads*head_dim); kv.seq and kv.n_ctx: (M). On a GPU out may have another dtype
// than q (a GEMM's input).
void attention(const DeviceContext& ctx, Tensor out, Tensor q, const KvBatch& kv,
               const AttentionShape& shape);

// pool row rows[m] ← src row m, for the key and value pools alike: this step's keys and values
// (M, kv_dim) appended to the cache. rows: (M) i32.
void kv_write(const DeviceContext& ctx, Tensor key_pool, Tensor value_pool, Tensor k, Tensor v,
              Tensor rows);

}  // namespace tpllama::ops
