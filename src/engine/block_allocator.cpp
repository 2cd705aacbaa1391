// The slots and block tables of rank 0's view of the KV cache, and the prefix cache's hash chains
// over the sequences' tokens.
#include "engine/block_allocator.h"

#include <algorithm>

#include "core/error.h"
#include "core/random.h"

namespace tpllama {
namespace {

constexpr uint64_t kChainRoot = 0x6A09E667F3BCC908ULL;

// The positions whose KV a sequence may take from the cache: all but the first one whose logits it
// needs.
int cacheable_positions(const Sequence& s) {
  const int last = static_cast<int>(s.tokens().size()) - 1;
  return scores(s) ? std::min(last, first_unscored(s)) : last;
}

// n_blocks, once the sizes are checked (before the pool is built on them).
int checked_blocks(int n_blocks, int block_size, int max_slots) {
  TPLLAMA_CHECK(n_blocks >= 0 && block_size > 0 && max_slots > 0, "KV blocks ", n_blocks, " of ",
                block_size, " positions for ", max_slots, " slots");
  return n_blocks;
}

}  // namespace

BlockAllocator::BlockAllocator(int n_blocks, int block_size, int max_slots, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      pool_(checked_blocks(n_blocks, block_size, max_slots), block_size, prefix_caching),
      tables_(static_cast<size_t>(max_slots)),
      chains_(static_cast<size_t>(max_slots)),
      slot_used_(static_cast<size_t>(max_slots), false),
      looked_up_(static_cast<size_t>(max_slots), false) {}

int BlockAllocator::acquire_slot() {
  const auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  TPLLAMA_CHECK(free_slot != slot_used_.end(), "every one of the ", slot_used_.size(),
                " sequence slots is taken");
  *free_slot = true;
  return static_cast<int>(free_slot - slot_used_.begin());
}

int BlockAllocator::fork_slot(int parent) {
  const int slot = acquire_slot();
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(slot)];
  for (const int32_t block : table(parent)) {
    pool_.add_reference(block);
    blocks.push_back(block);
    changes_.push_back({slot, block});
  }
  chains_[static_cast<size_t>(slot)] = chains_[static_cast<size_t>(parent)];
  looked_up_[static_cast<size_t>(slot)] = true;  // its prompt was counted with its parent's
  return slot;
}

void BlockAllocator::release_slot(int slot) {
  TPLLAMA_CHECK(slot >= 0 && slot < static_cast<int>(slot_used_.size()) &&
                    slot_used_[static_cast<size_t>(slot)],
                "release of slot ", slot, ", which is not taken");
  release_blocks(slot);
  slot_used_[static_cast<size_t>(slot)] = false;
  looked_up_[static_cast<size_t>(slot)] = false;
}

// Released in reverse, so a sequence's last blocks (the least shared) become evictable first.
void BlockAllocator::release_blocks(int slot) {
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(slot)];
  chains_[static_cast<size_t>(slot)].clear();
  if (blocks.empty()) return;
  changes_.push_back({slot, CacheOp::kRelease});
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool_.release(*it);
  blocks.clear();
}

uint64_t BlockAllocator::block_hash(uint64_t parent, const Sequence& s, int index) const {
  uint64_t h = splitmix64(parent ^ kChainRoot);
  const int32_t* tokens = block_tokens(s, index);
  for (int i = 0; i < block_size_; ++i) h = splitmix64(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

// The hash found the block; its parent and tokens must agree too (a hash collision is not a match),
// and the group being planned must not be writing it.
bool BlockAllocator::block_matches(int32_t block, uint64_t parent, const Sequence& s,
                                   int index) const {
  return pool_.holds(block, parent, block_tokens(s, index)) &&
         pool_.written_by(block) != planning_group_;
}

int BlockAllocator::attach_cached_prefix(const Sequence& s) {
  if (!prefix_caching_ || s.counts().computed != 0 || !table(s.counts().slot).empty()) return 0;
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(s.counts().slot)];
  std::vector<uint64_t>& chain = chains_[static_cast<size_t>(s.counts().slot)];
  const int limit = cacheable_positions(s) / block_size_;
  uint64_t parent = 0;
  for (int i = 0; i < limit; ++i) {
    const uint64_t h = block_hash(parent, s, i);
    const int32_t block = pool_.find(h);
    if (block < 0 || !block_matches(block, parent, s, i)) break;
    pool_.add_reference(block);
    blocks.push_back(block);
    chain.push_back(h);
    changes_.push_back({s.counts().slot, block});
    parent = h;
  }
  const int hit = static_cast<int>(blocks.size()) * block_size_;
  if (looked_up_[static_cast<size_t>(s.counts().slot)]) {
    stats_.recompute_hits += hit;
  } else {
    stats_.prompt_tokens += s.counts().prompt;
    stats_.hit_tokens += hit;
    looked_up_[static_cast<size_t>(s.counts().slot)] = true;
  }
  return hit;
}

int32_t BlockAllocator::cached_first_block(const Sequence& s) const {
  if (!prefix_caching_ || !table(s.counts().slot).empty() || cacheable_positions(s) < block_size_)
    return -1;
  return pool_.find(block_hash(0, s, 0));
}

bool BlockAllocator::first_block_being_written(const Sequence& s) const {
  const int32_t b = cached_first_block(s);
  return b >= 0 && pool_.written_by(b) == planning_group_;
}

bool BlockAllocator::first_block_cached(const Sequence& s) const {
  const int32_t b = cached_first_block(s);
  return b >= 0 && block_matches(b, 0, s, 0);
}

void BlockAllocator::register_full_blocks(const Sequence& s) {
  if (!prefix_caching_) return;
  const std::vector<int32_t>& blocks = table(s.counts().slot);
  std::vector<uint64_t>& chain = chains_[static_cast<size_t>(s.counts().slot)];
  const int full = std::min<int>((s.counts().computed + s.counts().scheduled) / block_size_,
                                 static_cast<int>(blocks.size()));
  for (int i = static_cast<int>(chain.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : chain.back();
    const uint64_t h = block_hash(parent, s, i);
    chain.push_back(h);
    // Skipped when already cached, or another copy is.
    pool_.cache(blocks[static_cast<size_t>(i)], h, parent, block_tokens(s, i), planning_group_);
  }
}

int BlockAllocator::blocks_to_add(const Sequence& s, int take) const {
  const int positions = s.counts().computed + take;
  return (positions + block_size_ - 1) / block_size_ -
         static_cast<int>(table(s.counts().slot).size());
}

bool BlockAllocator::writes_shared_block(const Sequence& s) const {
  const std::vector<int32_t>& blocks = table(s.counts().slot);
  const auto first = static_cast<size_t>(s.counts().computed / block_size_);
  return first < blocks.size() && pool_.shared(blocks[first]);
}

int BlockAllocator::shortfall(const Sequence& s, int take) const {
  return std::max(0, blocks_to_add(s, take) + (writes_shared_block(s) ? 1 : 0) - free_blocks());
}

int BlockAllocator::reserve(const Sequence& s, int take) {
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(s.counts().slot)];
  const bool copy = writes_shared_block(s);
  const int room =
      (static_cast<int>(blocks.size()) + free_blocks() - (copy ? 1 : 0)) * block_size_ -
      s.counts().computed;
  take = std::min(take, room);
  if (take <= 0) return 0;
  if (copy) {  // its next position goes into a block another table holds: it gets a copy
    const int index = s.counts().computed / block_size_;
    int32_t& block = blocks[static_cast<size_t>(index)];
    block = pool_.copy_on_write(block).block;
    changes_.push_back({s.counts().slot, block, index});
  }
  for (int n = blocks_to_add(s, take); n > 0; --n) {
    blocks.push_back(pool_.take());
    changes_.push_back({s.counts().slot, blocks.back()});
  }
  return take;
}

PrefixCacheStats BlockAllocator::prefix_stats() const {
  PrefixCacheStats stats = stats_;
  stats.evicted_blocks = pool_.evicted_blocks();
  return stats;
}

std::vector<CacheOp> BlockAllocator::take_changes() {
  std::vector<CacheOp> out;
  out.swap(changes_);
  return out;
}

}  // namespace tpllama
