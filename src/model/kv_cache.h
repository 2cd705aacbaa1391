// Paged KV cache of one rank: a pool of fixed-size blocks for its layers × its kv heads, and one
// block table per sequence slot. Rank 0 decides which block goes to which slot (the step plan
// carries those decisions); every rank applies them, so the tables agree everywhere. The pool and
// a mirror of the tables live on the rank's device; the tables change on the host and reach the
// device, changed slots only, before the next forward (upload_tables).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"

namespace tpllama {

class KvCache {
 public:
  // max_blocks_per_slot: the longest table a slot may have (its context over the block size);
  // 0: n_blocks. dtype: how keys and values are held (f32, or bf16: half the memory and reads).
  KvCache(int n_layers_local, int kv_dim_local, int block_size, int n_blocks, int max_slots,
          const DeviceContext& ctx = {}, int max_blocks_per_slot = 0, DType dtype = DType::kF32);

  // Bytes one block takes on a rank holding these layers and kv heads.
  static uint64_t bytes_per_block(int n_layers_local, int kv_dim_local, int block_size,
                                  DType dtype = DType::kF32);

  void append_block(int slot, int block);
  // Block `index` of the slot's table becomes `block`, which first receives a copy of the old
  // one's keys and values in every layer (copy on write of a block forked samples share).
  void replace_block(int slot, int index, int block);
  void release(int slot);  // empties the slot's table; the blocks return to rank 0's free list

  const std::vector<int32_t>& blocks(int slot) const { return tables_[static_cast<size_t>(slot)]; }
  int capacity(int slot) const { return static_cast<int>(blocks(slot).size()) * block_size_; }
  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  int max_slots() const { return static_cast<int>(tables_.size()); }
  uint64_t bytes() const { return static_cast<uint64_t>(pool_.nbytes()); }

  // The pools of a layer, (n_blocks * block_size, kv_dim) in dtype() on the device: row
  // (block * block_size + offset) holds one position.
  Tensor key_pool(int layer_local) const { return pool(layer_local, 0); }
  Tensor value_pool(int layer_local) const { return pool(layer_local, 1); }
  // Row of position pos of a slot in the pools.
  int64_t row_of(int slot, int pos) const;

  // Copies the tables changed since the last call to the device mirror.
  void upload_tables();
  // The device mirror, (max_slots, max_blocks_per_slot) i32: row s is slot s's table.
  Tensor device_tables() const;

 private:
  Tensor pool(int layer_local, int which) const;
  void mark_changed(int slot);  // its table goes to the device at the next upload_tables
  // Before a block is first written: the pages of its chunk (blocks_per_chunk_ blocks, about 2 MiB
  // a pool) populated in every pool at once (ops::populate), not faulted in page by page by the
  // KV writes of the steps (on this project's VM a fault costs ~10 us: 32 prompts of 128 tokens of
  // the 110m shape lost 0.2-0.8 s of a 1.5 s prefill to them).
  void ready(int block);

  int blocks_per_chunk_ = 1;
  std::vector<uint8_t> chunk_ready_;

  DeviceContext ctx_;
  int n_layers_;
  int kv_dim_;
  int block_size_;
  int n_blocks_;
  int max_blocks_per_slot_;
  DType dtype_;
  size_t layer_stride_;  // elements per layer: keys then values, n_blocks * block_size rows each
  Buffer pool_;
  Buffer device_tables_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> changed_;  // slots whose table changed since upload_tables
  std::vector<uint8_t> is_changed_;
};

}  // namespace tpllama
