// BlockPool: rank 0's book of the KV blocks every rank holds — the free list, a reference count per
// block, and the prefix cache's blocks (found by hash, their parent hash and tokens kept to rule
// out a collision, evicted least recently used once no table holds them). It knows blocks only, no
// sequence (vLLM v1's BlockPool); the block tables and the hash chain over a sequence's tokens are
// the BlockAllocator's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace tpllama {

// Blocks a sequence of `context` tokens takes: whole blocks.
long long blocks_per_sequence(int context, int block_size);
// Sequences of `tokens` positions that n_blocks blocks hold at once: each takes whole blocks.
double sequences_held(long long n_blocks, int block_size, double tokens);

class BlockPool {
 public:
  // keep_tokens: blocks may be cached (prefix caching), so their tokens are kept.
  BlockPool(int n_blocks, int block_size, bool keep_tokens);

  // A block with one reference: a free one (the lowest id first at the start), else the least
  // recently used cached block no table holds, which is evicted. There must be one (available()).
  int32_t take();
  // One more reference to a block (a table takes a cached block); a cached block no table held
  // stops being evictable.
  void add_reference(int32_t block);
  // One reference less; at none, a cached block waits, most recently used last, to be found again
  // or evicted; any other is free at once.
  void release(int32_t block);

  // The block to write into for a holder of `block` that is about to write a position of it. A
  // block only this holder references is written in place (copy_from -1). A shared one is copied:
  // the holder gets a fresh block in its place (one reference), loses its reference to the old,
  // and every rank must copy the old block's KV into the new (copy_from) before the write. Only a
  // partial block is ever written, and a partial block is never cached (forked samples share
  // their prompt's last, partial block: BlockAllocator::reserve).
  struct Write {
    int32_t block = -1;
    int32_t copy_from = -1;
  };
  Write copy_on_write(int32_t block);
  // Whether copy_on_write would copy the block: another table holds it too, or it is cached.
  bool shared(int32_t block) const { return ref_[index(block)] > 1 || cached_[index(block)]; }

  // The cached block of a chain hash, or -1.
  int32_t find(uint64_t hash) const;
  // Whether `block` is cached with this parent hash and these block_size tokens (a hash found is
  // not yet a match: hashes may collide).
  bool holds(int32_t block, uint64_t parent, const int32_t* tokens) const;
  // Makes a full block findable by its chain hash, written by `group`. False (nothing changes)
  // when it is cached already, or another block holds the hash.
  bool cache(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t group);
  // The group that wrote a cached block (its KV is complete once that group has run everywhere).
  int64_t written_by(int32_t block) const { return written_by_[index(block)]; }

  // Blocks take() may hand out: free ones and cached ones no table holds.
  int available() const { return static_cast<int>(free_.size() + evictable_.size()); }
  int cached_blocks() const { return static_cast<int>(by_hash_.size()); }
  int references(int32_t block) const { return ref_[index(block)]; }
  long long evicted_blocks() const { return evicted_; }
  int block_size() const { return block_size_; }

 private:
  static std::size_t index(int32_t block) { return static_cast<size_t>(block); }
  // An evicted block: no longer findable.
  void forget(int32_t block);

  int block_size_;
  std::vector<int32_t> free_;  // no reference, not cached; taken from the back
  std::vector<int> ref_;       // by block: the tables holding it
  // By block, while cached: its chain hash, its parent's, its writing group and its tokens
  // (block_size each).
  std::vector<bool> cached_;
  std::vector<uint64_t> hash_;
  std::vector<uint64_t> parent_;
  std::vector<int64_t> written_by_;
  std::vector<int32_t> tokens_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> evictable_;  // cached blocks no table holds, least recently used first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  long long evicted_ = 0;
};

}  // namespace tpllama
