// The free list, slots and block tables of rank 0's view of the KV cache.
#include "runtime/block_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace tpllama {

BlockAllocator::BlockAllocator(int n_blocks, int block_size, int max_slots)
    : block_size_(block_size),
      tables_(static_cast<size_t>(max_slots)),
      slot_used_(static_cast<size_t>(max_slots), false) {
  TPLLAMA_CHECK(n_blocks >= 0 && block_size > 0 && max_slots > 0, "KV blocks ", n_blocks, " of ", block_size,
                " positions for ", max_slots, " slots");
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is handed out first
}

int BlockAllocator::acquire_slot() {
  const auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  TPLLAMA_CHECK(free_slot != slot_used_.end(), "every one of the ", slot_used_.size(), " sequence slots is taken");
  *free_slot = true;
  return static_cast<int>(free_slot - slot_used_.begin());
}

void BlockAllocator::release_slot(int slot) {
  TPLLAMA_CHECK(slot >= 0 && slot < static_cast<int>(slot_used_.size()) && slot_used_[static_cast<size_t>(slot)],
                "release of slot ", slot, ", which is not taken");
  release_blocks(slot);
  slot_used_[static_cast<size_t>(slot)] = false;
}

void BlockAllocator::release_blocks(int slot) {
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(slot)];
  if (blocks.empty()) return;
  changes_.push_back({slot, CacheOp::kRelease});
  free_.insert(free_.end(), blocks.rbegin(), blocks.rend());
  blocks.clear();
}

bool BlockAllocator::preempt_younger_than(const Sequence& s, const ActiveSequences& active) {
  for (auto it = active.rbegin(); it != active.rend() && it->get() != &s; ++it) {
    Sequence& victim = **it;
    if (victim.in_flight || table(victim.slot).empty()) continue;
    release_blocks(victim.slot);
    victim.preempt();
    ++preemptions_;
    return true;
  }
  return false;
}

int BlockAllocator::reserve(Sequence& s, int take, const ActiveSequences& active) {
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(s.slot)];
  const auto blocks_for = [&](int positions) {
    return (positions + block_size_ - 1) / block_size_ - static_cast<int>(blocks.size());
  };
  while (blocks_for(s.n_computed + take) > free_blocks() && preempt_younger_than(s, active)) {
  }
  take = std::min(take, static_cast<int>(blocks.size() + free_.size()) * block_size_ - s.n_computed);
  for (int n = blocks_for(s.n_computed + take); n > 0; --n) {
    blocks.push_back(free_.back());
    free_.pop_back();
    changes_.push_back({s.slot, blocks.back()});
  }
  return std::max(take, 0);
}

std::vector<CacheOp> BlockAllocator::take_changes() {
  std::vector<CacheOp> out;
  out.swap(changes_);
  return out;
}

}  // namespace tpllama
