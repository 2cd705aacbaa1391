// KV cache of one rank: its layers × its kv heads, one contiguous region per sequence slot sized
// for that sequence's prompt plus its token budget. (The batch-engine issue replaces the regions
// with fixed-size paged blocks.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tpllama {

class KvCache {
 public:
  KvCache(int n_layers_local, int kv_dim_local, int max_slots);

  // Reserves a slot able to hold capacity positions; throws when every slot is taken.
  int allocate(int capacity);
  // Reserves a given slot (as the scheduler on rank 0 decided); throws when it is taken.
  void allocate_at(int slot, int capacity);
  void release(int slot);
  int free_slots() const;

  // (capacity, kv_dim_local) row-major, row t = position t.
  float* keys(int slot, int layer_local) const { return base(slot, layer_local); }
  float* values(int slot, int layer_local) const {
    return base(slot, layer_local) + static_cast<size_t>(capacity(slot)) * kv_dim_;
  }
  int capacity(int slot) const { return slots_[static_cast<size_t>(slot)].capacity; }
  uint64_t bytes_in_use() const { return bytes_in_use_; }
  int kv_dim() const { return kv_dim_; }

 private:
  struct Slot {
    Buffer storage;  // (n_layers_local, 2, capacity, kv_dim_local)
    int capacity = 0;
    bool used = false;
  };
  float* base(int slot, int layer_local) const;

  int n_layers_;
  int kv_dim_;
  std::vector<Slot> slots_;
  uint64_t bytes_in_use_ = 0;
};

}  // namespace tpllama
