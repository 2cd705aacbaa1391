// Block tables and the pool of the paged KV cache.
#include "model/kv_cache.h"

#include "core/error.h"

namespace tpllama {

uint64_t KvCache::bytes_per_block(int n_layers_local, int kv_dim_local, int block_size) {
  return static_cast<uint64_t>(n_layers_local) * 2 * static_cast<uint64_t>(block_size) *
         static_cast<uint64_t>(kv_dim_local) * sizeof(float);
}

KvCache::KvCache(int n_layers_local, int kv_dim_local, int block_size, int n_blocks, int max_slots)
    : n_layers_(n_layers_local),
      kv_dim_(kv_dim_local),
      block_size_(block_size),
      n_blocks_(n_blocks),
      layer_stride_(2 * static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size) * static_cast<size_t>(kv_dim_local)),
      pool_(static_cast<size_t>(n_layers_local) * layer_stride_ * sizeof(float)),
      tables_(static_cast<size_t>(max_slots)) {
  if (block_size < 1) fail("--kv-block-size must be at least 1, got ", block_size);
  if (n_blocks < 1) fail("the KV cache must hold at least one block, got ", n_blocks);
}

void KvCache::append_block(int slot, int block) {
  TPLLAMA_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size() && block >= 0 && block < n_blocks_,
                "append block ", block, " to slot ", slot);
  tables_[static_cast<size_t>(slot)].push_back(block);
}

void KvCache::release(int slot) {
  TPLLAMA_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size(), "release of slot ", slot);
  tables_[static_cast<size_t>(slot)].clear();
}

int64_t KvCache::row_of(int slot, int pos) const {
  const std::vector<int32_t>& t = blocks(slot);
  TPLLAMA_CHECK(pos >= 0 && pos < capacity(slot), "position ", pos, " beyond the ", t.size(), " blocks of slot ", slot);
  return static_cast<int64_t>(t[static_cast<size_t>(pos / block_size_)]) * block_size_ + pos % block_size_;
}

}  // namespace tpllama
