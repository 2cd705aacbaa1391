// The free list, reference counts and cached blocks of rank 0's view of the KV cache.
#include "engine/block_pool.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tpllama {

long long blocks_per_sequence(int context, int block_size) {
  return (static_cast<long long>(context) + block_size - 1) / block_size;
}

double sequences_held(long long n_blocks, int block_size, double tokens) {
  const double per_sequence = std::max(1.0, std::ceil(tokens / block_size));
  return static_cast<double>(n_blocks) / per_sequence;
}

BlockPool::BlockPool(int n_blocks, int block_size, bool keep_tokens)
    : block_size_(block_size),
      ref_(static_cast<size_t>(std::max(n_blocks, 0)), 0),
      cached_(static_cast<size_t>(std::max(n_blocks, 0)), false),
      hash_(static_cast<size_t>(std::max(n_blocks, 0)), 0),
      parent_(static_cast<size_t>(std::max(n_blocks, 0)), 0),
      written_by_(static_cast<size_t>(std::max(n_blocks, 0)), -1),
      lru_pos_(static_cast<size_t>(std::max(n_blocks, 0))) {
  TPLLAMA_CHECK(n_blocks >= 0 && block_size > 0, "KV blocks ", n_blocks, " of ", block_size,
                " positions");
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is handed out first
  if (keep_tokens) tokens_.resize(static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size));
}

int32_t BlockPool::take() {
  int32_t block = 0;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    TPLLAMA_CHECK(!evictable_.empty(), "no free KV block to take");
    block = evictable_.front();
    evictable_.pop_front();
    forget(block);
    ++evicted_;
  }
  ref_[index(block)] = 1;
  return block;
}

void BlockPool::add_reference(int32_t block) {
  const size_t b = index(block);
  if (ref_[b]++ == 0) evictable_.erase(lru_pos_[b]);
}

void BlockPool::release(int32_t block) {
  const size_t b = index(block);
  TPLLAMA_CHECK(ref_[b] > 0, "block ", block, " has no reference");
  if (--ref_[b] > 0) return;
  if (cached_[b])
    lru_pos_[b] = evictable_.insert(evictable_.end(), block);
  else
    free_.push_back(block);
}

// A cached block is treated as shared even with one holder: a later sequence may find it.
BlockPool::Write BlockPool::copy_on_write(int32_t block) {
  const size_t b = index(block);
  TPLLAMA_CHECK(ref_[b] > 0, "write to block ", block, ", which no table holds");
  if (ref_[b] == 1 && !cached_[b]) return {block, -1};
  const int32_t copy = take();  // before the release, so the copy is never the block itself
  release(block);
  return {copy, block};
}

void BlockPool::forget(int32_t block) {
  const size_t b = index(block);
  auto it = by_hash_.find(hash_[b]);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
  cached_[b] = false;
}

int32_t BlockPool::find(uint64_t hash) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? -1 : it->second;
}

bool BlockPool::holds(int32_t block, uint64_t parent, const int32_t* tokens) const {
  const size_t b = index(block);
  if (!cached_[b] || parent_[b] != parent) return false;
  const auto first =
      tokens_.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(block_size_));
  return std::equal(tokens, tokens + block_size_, first);
}

bool BlockPool::cache(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens,
                      int64_t group) {
  const size_t b = index(block);
  if (cached_[b] || by_hash_.count(hash) != 0) return false;
  TPLLAMA_CHECK(!tokens_.empty(), "block ", block, " cached by a pool that keeps no tokens");
  cached_[b] = true;
  hash_[b] = hash;
  parent_[b] = parent;
  written_by_[b] = group;
  std::copy_n(tokens, block_size_,
              tokens_.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(block_size_)));
  by_hash_.emplace(hash, block);
  return true;
}

}  // namespace tpllama
