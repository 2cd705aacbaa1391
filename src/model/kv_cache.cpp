// Slot bookkeeping for the contiguous per-sequence KV cache.
#include "model/kv_cache.h"

#include "core/error.h"

namespace tpllama {

KvCache::KvCache(int n_layers_local, int kv_dim_local, int max_slots)
    : n_layers_(n_layers_local), kv_dim_(kv_dim_local), slots_(static_cast<size_t>(max_slots)) {}

int KvCache::allocate(int capacity) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].used) continue;
    allocate_at(static_cast<int>(i), capacity);
    return static_cast<int>(i);
  }
  fail("KV cache: all ", slots_.size(), " sequence slots are in use");
}

void KvCache::allocate_at(int slot, int capacity) {
  TPLLAMA_CHECK(capacity > 0 && slot >= 0 && static_cast<size_t>(slot) < slots_.size() &&
                    !slots_[static_cast<size_t>(slot)].used,
                "allocate slot ", slot, " capacity ", capacity);
  Slot& s = slots_[static_cast<size_t>(slot)];
  size_t bytes = static_cast<size_t>(n_layers_) * 2 * static_cast<size_t>(capacity) *
                 static_cast<size_t>(kv_dim_) * sizeof(float);
  if (s.storage.nbytes() < bytes) {
    bytes_in_use_ -= s.storage.nbytes();
    s.storage = Buffer(bytes);
    bytes_in_use_ += bytes;
  }
  s.capacity = capacity;
  s.used = true;
}

void KvCache::release(int slot) {
  TPLLAMA_CHECK(slot >= 0 && static_cast<size_t>(slot) < slots_.size() && slots_[static_cast<size_t>(slot)].used,
                "release of slot ", slot);
  slots_[static_cast<size_t>(slot)].used = false;
}

int KvCache::free_slots() const {
  int n = 0;
  for (const Slot& s : slots_) n += s.used ? 0 : 1;
  return n;
}

float* KvCache::base(int slot, int layer_local) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  return static_cast<float*>(s.storage.data()) +
         static_cast<size_t>(layer_local) * 2 * static_cast<size_t>(s.capacity) * static_cast<size_t>(kv_dim_);
}

}  // namespace tpllama
