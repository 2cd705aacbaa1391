// BlockAllocator: rank 0's book of the paged KV cache every rank holds (free blocks, sequence slots,
// block tables, and the changes each plan carries to the other ranks), and preemption when blocks
// run out. Prefix sharing will live here.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/sequence.h"
#include "runtime/step_plan.h"

namespace tpllama {

class BlockAllocator {
 public:
  BlockAllocator(int n_blocks, int block_size, int max_slots);

  // The lowest free sequence slot; there must be one (the engine admits at most max_slots).
  int acquire_slot();
  // Returns the slot's blocks to the free list and frees the slot.
  void release_slot(int slot);

  // Gives `s` the blocks for up to `take` more positions after its n_computed, first preempting
  // younger sequences of `active` that are not in flight while the free list is short. Returns how
  // many positions s may compute now (0: none; it waits for blocks held by sequences in flight).
  int reserve(Sequence& s, int take, const ActiveSequences& active);

  // Block table changes since the last call, in the order every rank must apply them.
  std::vector<CacheOp> take_changes();

  const std::vector<int32_t>& table(int slot) const { return tables_[static_cast<size_t>(slot)]; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  long long preemptions() const { return preemptions_; }

 private:
  void release_blocks(int slot);
  // Preempts the youngest sequence admitted after s that is not in flight and holds blocks; false
  // when there is none.
  bool preempt_younger_than(const Sequence& s, const ActiveSequences& active);

  int block_size_;
  std::vector<int32_t> free_;                 // taken from the back
  std::vector<std::vector<int32_t>> tables_;  // by slot
  std::vector<bool> slot_used_;
  std::vector<CacheOp> changes_;
  long long preemptions_ = 0;
};

}  // namespace tpllama
