// The free list, slots and block tables of rank 0's view of the KV cache, and the prefix cache over
// them.
#include "runtime/block_allocator.h"

#include <algorithm>

#include "core/error.h"
#include "core/splitmix64.h"

namespace tpllama {
namespace {

constexpr uint64_t kChainRoot = 0x6A09E667F3BCC908ULL;

// The positions whose KV a sequence may take from the cache: all but the first one whose logits it
// needs.
int cacheable_positions(const Sequence& s) {
  const int last = static_cast<int>(s.tokens.size()) - 1;
  return s.request.scoring ? std::min(last, s.first_unscored()) : last;
}

}  // namespace

BlockAllocator::BlockAllocator(int n_blocks, int block_size, int max_slots, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      tables_(static_cast<size_t>(max_slots)),
      chains_(static_cast<size_t>(max_slots)),
      slot_used_(static_cast<size_t>(max_slots), false),
      ref_(static_cast<size_t>(std::max(n_blocks, 0)), 0),
      cached_(static_cast<size_t>(std::max(n_blocks, 0)), false),
      hash_(static_cast<size_t>(std::max(n_blocks, 0)), 0),
      parent_(static_cast<size_t>(std::max(n_blocks, 0)), 0),
      written_by_(static_cast<size_t>(std::max(n_blocks, 0)), -1),
      lru_pos_(static_cast<size_t>(std::max(n_blocks, 0))) {
  TPLLAMA_CHECK(n_blocks >= 0 && block_size > 0 && max_slots > 0, "KV blocks ", n_blocks, " of ", block_size,
                " positions for ", max_slots, " slots");
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is handed out first
  if (prefix_caching_) tokens_.resize(static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size));
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

// A block no table holds any more: a cached one waits, most recently used last, to be found again
// or evicted; any other is free at once. Released in reverse, so a sequence's last blocks (the
// least shared) go first.
void BlockAllocator::release_blocks(int slot) {
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(slot)];
  chains_[static_cast<size_t>(slot)].clear();
  if (blocks.empty()) return;
  changes_.push_back({slot, CacheOp::kRelease});
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const auto b = static_cast<size_t>(*it);
    TPLLAMA_CHECK(ref_[b] > 0, "block ", *it, " of slot ", slot, " has no reference");
    if (--ref_[b] > 0) continue;
    if (cached_[b]) {
      lru_pos_[b] = evictable_.insert(evictable_.end(), *it);
    } else {
      free_.push_back(*it);
    }
  }
  blocks.clear();
}

void BlockAllocator::forget(int32_t block) {
  const auto b = static_cast<size_t>(block);
  auto it = by_hash_.find(hash_[b]);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
  cached_[b] = false;
}

int32_t BlockAllocator::take_block() {
  int32_t block = 0;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    TPLLAMA_CHECK(!evictable_.empty(), "no free KV block to take");
    block = evictable_.front();
    evictable_.pop_front();
    forget(block);
    ++stats_.evicted_blocks;
  }
  ref_[static_cast<size_t>(block)] = 1;
  return block;
}

uint64_t BlockAllocator::block_hash(uint64_t parent, const Sequence& s, int index) const {
  uint64_t h = splitmix64(parent ^ kChainRoot);
  const auto first = static_cast<size_t>(index) * static_cast<size_t>(block_size_);
  for (size_t i = first; i < first + static_cast<size_t>(block_size_); ++i)
    h = splitmix64(h ^ static_cast<uint32_t>(s.tokens[i]));
  return h;
}

// The hash found the block; its parent and tokens must agree too (a hash collision is not a match).
bool BlockAllocator::block_matches(int32_t block, uint64_t parent, const Sequence& s, int index) const {
  const auto b = static_cast<size_t>(block);
  if (!cached_[b] || parent_[b] != parent || written_by_[b] == planning_group_) return false;
  const auto first = static_cast<size_t>(index) * static_cast<size_t>(block_size_);
  return std::equal(s.tokens.begin() + static_cast<std::ptrdiff_t>(first),
                    s.tokens.begin() + static_cast<std::ptrdiff_t>(first + static_cast<size_t>(block_size_)),
                    tokens_.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(block_size_)));
}

int BlockAllocator::attach_cached_prefix(Sequence& s) {
  if (!prefix_caching_ || s.n_computed != 0 || !table(s.slot).empty()) return 0;
  std::vector<int32_t>& blocks = tables_[static_cast<size_t>(s.slot)];
  std::vector<uint64_t>& chain = chains_[static_cast<size_t>(s.slot)];
  const int limit = cacheable_positions(s) / block_size_;
  uint64_t parent = 0;
  for (int i = 0; i < limit; ++i) {
    const uint64_t h = block_hash(parent, s, i);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end() || !block_matches(it->second, parent, s, i)) break;
    const auto b = static_cast<size_t>(it->second);
    if (ref_[b]++ == 0) evictable_.erase(lru_pos_[b]);
    blocks.push_back(it->second);
    chain.push_back(h);
    changes_.push_back({s.slot, it->second});
    parent = h;
  }
  s.n_computed = static_cast<int>(blocks.size()) * block_size_;
  if (s.prefix_looked_up) {
    stats_.recompute_hits += s.n_computed;
  } else {
    stats_.prompt_tokens += s.n_prompt;
    stats_.hit_tokens += s.n_computed;
    s.prefix_looked_up = true;
  }
  return s.n_computed;
}

int32_t BlockAllocator::cached_first_block(const Sequence& s) const {
  if (!prefix_caching_ || !table(s.slot).empty() || cacheable_positions(s) < block_size_) return -1;
  auto it = by_hash_.find(block_hash(0, s, 0));
  return it == by_hash_.end() ? -1 : it->second;
}

bool BlockAllocator::first_block_being_written(const Sequence& s) const {
  const int32_t b = cached_first_block(s);
  return b >= 0 && written_by_[static_cast<size_t>(b)] == planning_group_;
}

bool BlockAllocator::first_block_cached(const Sequence& s) const {
  const int32_t b = cached_first_block(s);
  return b >= 0 && block_matches(b, 0, s, 0);
}

void BlockAllocator::register_full_blocks(const Sequence& s) {
  if (!prefix_caching_) return;
  const std::vector<int32_t>& blocks = table(s.slot);
  std::vector<uint64_t>& chain = chains_[static_cast<size_t>(s.slot)];
  const int full = std::min<int>((s.n_computed + s.scheduled) / block_size_, static_cast<int>(blocks.size()));
  for (int i = static_cast<int>(chain.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : chain.back();
    const uint64_t h = block_hash(parent, s, i);
    chain.push_back(h);
    const int32_t block = blocks[static_cast<size_t>(i)];
    const auto b = static_cast<size_t>(block);
    if (cached_[b] || by_hash_.count(h) != 0) continue;  // already cached, or another copy is
    cached_[b] = true;
    hash_[b] = h;
    parent_[b] = parent;
    written_by_[b] = planning_group_;
    std::copy_n(s.tokens.begin() + static_cast<std::ptrdiff_t>(i) * block_size_, block_size_,
                tokens_.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(block_size_)));
    by_hash_.emplace(h, block);
  }
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
  take = std::min(take, static_cast<int>(blocks.size() + static_cast<size_t>(free_blocks())) * block_size_ - s.n_computed);
  for (int n = blocks_for(s.n_computed + take); n > 0; --n) {
    blocks.push_back(take_block());
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
