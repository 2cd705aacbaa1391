// BlockAllocator: the sequences' side of rank 0's KV book (vLLM v1's KVCacheManager) — sequence
// slots and their block tables, the changes each plan carries to the other ranks, blocks for the
// positions a sequence computes next, and automatic prefix caching: full blocks are found again
// by a hash chained over their tokens and shared. The blocks themselves (free list, reference
// counts, cached blocks, eviction) are the BlockPool's; whom to preempt when blocks run short is
// the Scheduler's. It reads sequences and never changes them.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_pool.h"
#include "engine/run_metrics.h"  // PrefixCacheStats
#include "engine/sequence.h"
#include "executor/step_plan.h"

namespace tpllama {

class BlockAllocator {
 public:
  // prefix_caching: full blocks are kept findable (see the file comment); off, a released block
  // goes straight back to the free list.
  BlockAllocator(int n_blocks, int block_size, int max_slots, bool prefix_caching = false);

  // The lowest free sequence slot; there must be one (the engine admits at most max_slots).
  int acquire_slot();
  // A slot for a sample forked from the sequence in slot `parent`: its table holds the parent's
  // blocks, each a reference more (whichever of them writes a shared block next writes a copy).
  int fork_slot(int parent);
  // Returns the slot's blocks (each a reference less) and frees the slot.
  void release_slot(int slot);
  // Returns the slot's blocks, last first (a preemption); the slot stays taken.
  void release_blocks(int slot);

  // The planner starts a group: blocks registered from now on are being written by it, and no
  // sequence of the same group may read them (they are complete only once its step has run on
  // every stage; groups run in the order they are planned).
  void begin_group(int64_t group) { planning_group_ = group; }

  // For a sequence that holds no block (new, or preempted): takes the longest run of cached blocks
  // matching its tokens, never past the first position whose logits it needs (its last token, or
  // a scoring request's first unscored position), so at least that position is computed again.
  // Returns the positions they hold (the Scheduler skips them: Sequence::skip_cached).
  int attach_cached_prefix(const Sequence& s);
  // Whether s (holding no block) would find its first block cached if it waited for the group
  // being planned: a sequence of that group is writing a block with the same tokens.
  bool first_block_being_written(const Sequence& s) const;
  // Whether s (holding no block) would find at least its first block in the cache now.
  bool first_block_cached(const Sequence& s) const;
  bool prefix_caching() const { return prefix_caching_; }

  // Blocks missing for s to compute `take` more positions after its n_computed (0: enough are
  // available), counting the copy of a shared block it writes into. The Scheduler preempts while
  // there is a shortfall, then reserves.
  int shortfall(const Sequence& s, int take) const;
  // Gives s the blocks for up to `take` more positions after its n_computed, as many as are
  // available; the block its next position goes into is first copied if another table holds it
  // (a CacheOp that replaces it). Returns how many positions s may compute now (0: none).
  int reserve(const Sequence& s, int take);
  // After s's chunk is planned: the blocks its positions below n_computed + scheduled fill become
  // findable by sequences of later groups.
  void register_full_blocks(const Sequence& s);

  // Block table changes since the last call, in the order every rank must apply them.
  std::vector<CacheOp> take_changes();

  const std::vector<int32_t>& table(int slot) const { return tables_[static_cast<size_t>(slot)]; }
  // Blocks a reservation may take: free ones and cached ones no sequence holds.
  int free_blocks() const { return pool_.available(); }
  int cached_blocks() const { return pool_.cached_blocks(); }
  int references(int32_t block) const { return pool_.references(block); }
  PrefixCacheStats prefix_stats() const;
  const BlockPool& pool() const { return pool_; }

 private:
  // Blocks s lacks for `take` more positions after its n_computed (<= 0: it holds enough).
  int blocks_to_add(const Sequence& s, int take) const;
  // Whether s's next position goes into a block it shares (a forked sample's prompt block).
  bool writes_shared_block(const Sequence& s) const;
  uint64_t block_hash(uint64_t parent, const Sequence& s, int index) const;
  // The cached block holding the hash of s's first block (s holds no block yet), or -1.
  int32_t cached_first_block(const Sequence& s) const;
  bool block_matches(int32_t block, uint64_t parent, const Sequence& s, int index) const;
  const int32_t* block_tokens(const Sequence& s, int index) const {
    return s.tokens().data() + static_cast<ptrdiff_t>(index) * block_size_;
  }

  int block_size_;
  bool prefix_caching_;
  BlockPool pool_;
  std::vector<std::vector<int32_t>> tables_;   // by slot
  std::vector<std::vector<uint64_t>> chains_;  // by slot: the hash chain of its full blocks so far
  std::vector<bool> slot_used_;
  // By slot: its sequence has asked the prefix cache (its prompt is counted once; later lookups
  // are recomputes after a preemption).
  std::vector<bool> looked_up_;
  std::vector<CacheOp> changes_;
  int64_t planning_group_ = -1;
  PrefixCacheStats stats_;  // all but evicted_blocks, which is the pool's
};

}  // namespace tpllama
