// Paged KV cache of one rank: a pool of fixed-size blocks for its layers × its kv heads, and one
// block table per sequence slot. Rank 0 decides which block goes to which slot (the step plan
// carries those decisions); every rank applies them, so the tables agree everywhere.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tpllama {

class KvCache {
 public:
  KvCache(int n_layers_local, int kv_dim_local, int block_size, int n_blocks, int max_slots);

  // Bytes one block takes on a rank holding these layers and kv heads.
  static uint64_t bytes_per_block(int n_layers_local, int kv_dim_local, int block_size);

  void append_block(int slot, int block);
  void release(int slot);  // empties the slot's table; the blocks return to rank 0's free list

  const std::vector<int32_t>& blocks(int slot) const { return tables_[static_cast<size_t>(slot)]; }
  int capacity(int slot) const { return static_cast<int>(blocks(slot).size()) * block_size_; }
  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int kv_dim() const { return kv_dim_; }
  uint64_t bytes() const { return static_cast<uint64_t>(pool_.nbytes()); }

  // Pool bases of a layer: row (block * block_size + offset) holds one position's kv_dim values.
  float* keys(int layer_local) const { return base(layer_local); }
  float* values(int layer_local) const { return base(layer_local) + layer_stride_ / 2; }
  // Row offset (in rows of kv_dim) of position pos of a slot.
  int64_t row_of(int slot, int pos) const;

 private:
  float* base(int layer_local) const {
    return static_cast<float*>(pool_.data()) + static_cast<size_t>(layer_local) * layer_stride_;
  }

  int n_layers_;
  int kv_dim_;
  int block_size_;
  int n_blocks_;
  size_t layer_stride_;  // floats per layer: keys then values, n_blocks * block_size rows each
  Buffer pool_;
  std::vector<std::vector<int32_t>> tables_;
};

}  // namespace tpllama
