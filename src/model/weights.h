// The weights one rank holds: its pipeline stage's layers and its TP slice of each tensor, in
// f32 host memory (converted from F32/F16/BF16 at load).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/shard_table.h"
#include "parallel/topology.h"

namespace tpllama {

struct LayerWeights {
  Tensor attn_norm;  // (dim)
  Tensor wq;         // (n_heads_local*head_dim, dim)
  Tensor wk;         // (n_kv_heads_local*head_dim, dim)
  Tensor wv;         // (n_kv_heads_local*head_dim, dim)
  Tensor wo;         // (dim, n_heads_local*head_dim)
  Tensor ffn_norm;   // (dim)
  Tensor w1;         // gate (hidden_local, dim)
  Tensor w3;         // up (hidden_local, dim)
  Tensor w2;         // down (dim, hidden_local)
};

struct ModelWeights {
  Tensor embed;                      // (vocab_local, dim), first stage only
  std::vector<LayerWeights> layers;  // this stage's layers, in order
  Tensor final_norm;                 // (dim), last stage only
  Tensor lm_head;                    // (vocab_local, dim), last stage only; may alias embed
  uint64_t bytes_held = 0;           // weight bytes in memory on this rank
  uint64_t bytes_read = 0;           // checkpoint bytes this rank copied from the files
  uint64_t elements_unique = 0;      // checkpoint elements held here and nowhere else
  uint64_t elements_replicated = 0;  // elements another rank holds as well
  std::vector<Buffer> storage;
};

// Validates every tensor's presence, dtype and shape before copying anything.
ModelWeights load_weights(const Checkpoint& checkpoint, const Topology& topology);

}  // namespace tpllama
