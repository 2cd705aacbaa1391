// BlockAllocator: rank 0's book of the paged KV cache every rank holds (free blocks, sequence slots,
// block tables, and the changes each plan carries to the other ranks), preemption when blocks run
// out, and automatic prefix caching: full blocks are found again by a hash chained over their
// tokens, shared by reference count, and evicted least-recently-used only when a block is needed.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "runtime/run_metrics.h"  // PrefixCacheStats
#include "runtime/sequence.h"
#include "runtime/step_plan.h"

namespace tpllama {

class BlockAllocator {
 public:
  // prefix_caching: full blocks are kept findable (see the file comment); off, a released block goes
  // straight back to the free list.
  BlockAllocator(int n_blocks, int block_size, int max_slots, bool prefix_caching = false);

  // The lowest free sequence slot; there must be one (the engine admits at most max_slots).
  int acquire_slot();
  // Returns the slot's blocks (each a reference less) and frees the slot.
  void release_slot(int slot);

  // The planner starts a group: blocks registered from now on are being written by it, and no
  // sequence of the same group may read them (they are complete only once its step has run on
  // every stage; groups run in the order they are planned).
  void begin_group(int64_t group) { planning_group_ = group; }

  // For a sequence that holds no block (new, or preempted): takes the longest run of cached blocks
  // matching its tokens, never past the first position whose logits it needs (its last token, or
  // a scoring request's first unscored position), so at least that position is computed again;
  // its n_computed moves past them. Returns the positions served from the cache.
  int attach_cached_prefix(Sequence& s);
  // Whether s (holding no block) would find its first block cached if it waited for the group
  // being planned: a sequence of that group is writing a block with the same tokens.
  bool first_block_being_written(const Sequence& s) const;
  // Whether s (holding no block) would find at least its first block in the cache now.
  bool first_block_cached(const Sequence& s) const;
  bool prefix_caching() const { return prefix_caching_; }

  // Gives `s` the blocks for up to `take` more positions after its n_computed, first preempting
  // younger sequences of `active` that are not in flight while the free list is short. Returns how
  // many positions s may compute now (0: none; it waits for blocks held by sequences in flight).
  int reserve(Sequence& s, int take, const ActiveSequences& active);
  // After s's chunk is planned: the blocks its positions below n_computed + scheduled fill become
  // findable by sequences of later groups.
  void register_full_blocks(const Sequence& s);

  // Block table changes since the last call, in the order every rank must apply them.
  std::vector<CacheOp> take_changes();

  const std::vector<int32_t>& table(int slot) const { return tables_[static_cast<size_t>(slot)]; }
  // Blocks a reservation may take: free ones and cached ones no sequence holds.
  int free_blocks() const { return static_cast<int>(free_.size() + evictable_.size()); }
  int cached_blocks() const { return static_cast<int>(by_hash_.size()); }
  int references(int32_t block) const { return ref_[static_cast<size_t>(block)]; }
  long long preemptions() const { return preemptions_; }
  const PrefixCacheStats& prefix_stats() const { return stats_; }

 private:
  void release_blocks(int slot);
  // A block for a new position: a free one, else the least recently used cached one (evicted).
  int32_t take_block();
  void forget(int32_t block);
  uint64_t block_hash(uint64_t parent, const Sequence& s, int index) const;
  // The cached block holding the hash of s's first block (s holds no block yet), or -1.
  int32_t cached_first_block(const Sequence& s) const;
  bool block_matches(int32_t block, uint64_t parent, const Sequence& s, int index) const;
  // Preempts the youngest sequence admitted after s that is not in flight and holds blocks; false
  // when there is none.
  bool preempt_younger_than(const Sequence& s, const ActiveSequences& active);

  int block_size_;
  bool prefix_caching_;
  std::vector<int32_t> free_;                 // no reference, not cached; taken from the back
  std::vector<std::vector<int32_t>> tables_;  // by slot
  std::vector<std::vector<uint64_t>> chains_;  // by slot: the hash chain of its full blocks so far
  std::vector<bool> slot_used_;
  std::vector<CacheOp> changes_;
  long long preemptions_ = 0;

  // Prefix caching, by block: references from slot tables; the chain hash, parent hash, tokens and
  // writing group of a cached block; and the cached blocks no table holds, least recently used
  // first.
  std::vector<int> ref_;
  std::vector<bool> cached_;
  std::vector<uint64_t> hash_;
  std::vector<uint64_t> parent_;
  std::vector<int64_t> written_by_;
  std::vector<int32_t> tokens_;  // block_size per block
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> evictable_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  int64_t planning_group_ = -1;
  PrefixCacheStats stats_;
};

}  // namespace tpllama
