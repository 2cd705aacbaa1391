// The weights one rank holds: its stage's layers, its TP slice of each tensor. Norms and the
// embedding are f32, matrices packed for ops::matmul in f32 or bf16, converted from the checkpoint
// at load or drawn from a seeded generator (benchmarks of shapes without files).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/shard_table.h"
#include "ops/matmul.h"
#include "ops/weight.h"
#include "parallel/topology.h"

namespace tpllama {

struct LayerWeights {
  Tensor attn_norm;       // (dim)
  ops::Weight wq;         // (n_heads_local*head_dim, dim)
  ops::Weight wk;         // (n_kv_heads_local*head_dim, dim)
  ops::Weight wv;         // (n_kv_heads_local*head_dim, dim)
  Tensor bq, bk, bv;      // biases of wq, wk, wv (their rows), or empty (qkv_bias false)
  Tensor q_norm, k_norm;  // (head_dim) each, or empty (qk_norm false)
  ops::Weight wo;         // (dim, n_heads_local*head_dim)
  Tensor ffn_norm;        // (dim)
  ops::Weight w1;         // gate (hidden_local, dim)
  ops::Weight w3;         // up (hidden_local, dim)
  ops::Weight w2;         // down (dim, hidden_local)
};

struct ModelWeights {
  Tensor embed;                      // (vocab_local, dim), first stage only
  std::vector<LayerWeights> layers;  // this stage's layers, in order
  Tensor final_norm;                 // (dim), last stage only
  ops::Weight lm_head;               // (vocab_local, dim), last stage only
  uint64_t bytes_held = 0;           // weight bytes in memory on this rank
  uint64_t matrix_bytes = 0;         // of which packed matrices: what one decode step reads
  uint64_t bytes_read = 0;           // checkpoint bytes this rank copied from the files
  uint64_t elements_unique = 0;      // checkpoint elements held here and nowhere else
  uint64_t elements_replicated = 0;  // elements another rank holds as well
  std::vector<Buffer> storage;
};

// Checks every tensor a rank reads: presence, shape and dtype (an int8 matrix's scales with it).
void check_checkpoint_tensors(const Checkpoint& checkpoint, const Topology& topology);

// Validates every tensor's presence, dtype and shape before copying anything. `dtype` is how the
// matrices are held (f32, bf16, or int8 on the CPU).
ModelWeights load_weights(const Checkpoint& checkpoint, const Topology& topology,
                          const DeviceContext& ctx = {}, DType dtype = DType::kF32);

// int8 weights are quantized per group of ops::cpu::kInt8Group columns of the whole matrix, so that
// every layout holds the same numbers: a TP split of the input features (o_proj, down_proj) must
// fall on group boundaries. Throws naming the first tensor this rank's slice cuts a group of.
// `held` says what holds int8 (e.g. "--dtype int8"), `otherwise` the way out besides another --tp.
void check_int8_slices(const LlamaConfig& config, const Topology& topology,
                       const std::string& held = "--dtype int8",
                       const std::string& otherwise = "use --dtype bf16");

// The bytes load_weights / random_weights will hold on this rank, known before any is copied
// (run's memory check).
uint64_t held_weight_bytes(const LlamaConfig& config, const Topology& topology,
                           const DeviceContext& ctx, DType dtype);

// Seeded random weights with the distributions of `tpllama convert --from random` (matrices
// uniform in ±1/sqrt(cols), norms 1 ± 0.1, embedding ±1). Each element is a function of the seed,
// the tensor name and its position in the full tensor, so every layout holds slices of the same
// model.
ModelWeights random_weights(const LlamaConfig& config, const Topology& topology,
                            const DeviceContext& ctx, DType dtype, uint64_t seed);

}  // namespace tpllama
