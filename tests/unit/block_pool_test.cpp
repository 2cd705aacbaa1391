// The BlockPool alone, on block ids (no sequence): the free list hands out the lowest id first and
// takes blocks back, references count holders, cached blocks are found by hash and checked by
// parent and tokens, blocks no one holds are evicted least recently used, and copy-on-write gives a
// holder of a shared block its own copy.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/block_pool.h"

namespace tpllama {
namespace {

TEST(BlockPool, FreeBlocksGoLowestFirstAndComeBack) {
  BlockPool pool(/*n_blocks=*/4, /*block_size=*/2, /*keep_tokens=*/false);
  EXPECT_EQ(pool.available(), 4);
  std::vector<int32_t> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(pool.take());
  EXPECT_EQ(taken, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.available(), 0);
  EXPECT_THROW(pool.take(), Error) << "no block left";
  pool.release(2);
  EXPECT_EQ(pool.available(), 1);
  EXPECT_EQ(pool.take(), 2) << "the block released is the one free";
  EXPECT_EQ(pool.evicted_blocks(), 0);
}

TEST(BlockPool, ABlockIsFreeOnlyOnceItsLastHolderReleasesIt) {
  BlockPool pool(2, 2, false);
  const int32_t b = pool.take();
  pool.add_reference(b);
  pool.add_reference(b);
  EXPECT_EQ(pool.references(b), 3);
  pool.release(b);
  pool.release(b);
  EXPECT_EQ(pool.available(), 1) << "one holder left";
  pool.release(b);
  EXPECT_EQ(pool.available(), 2);
  EXPECT_THROW(pool.release(b), Error) << "a block with no reference";
}

TEST(BlockPool, ACachedBlockIsFoundByItsHashAndMatchedByParentAndTokens) {
  BlockPool pool(4, 2, true);
  const int32_t b = pool.take();
  const std::vector<int32_t> tokens{5, 6}, other{5, 9};
  EXPECT_EQ(pool.find(42), -1);
  EXPECT_TRUE(pool.cache(b, /*hash=*/42, /*parent=*/7, tokens.data(), /*group=*/3));
  EXPECT_EQ(pool.find(42), b);
  EXPECT_EQ(pool.written_by(b), 3);
  EXPECT_EQ(pool.cached_blocks(), 1);
  EXPECT_TRUE(pool.holds(b, 7, tokens.data()));
  EXPECT_FALSE(pool.holds(b, 7, other.data())) << "same hash, other tokens: a collision";
  EXPECT_FALSE(pool.holds(b, 8, tokens.data())) << "another parent";
  const int32_t copy = pool.take();
  EXPECT_FALSE(pool.cache(copy, 42, 7, tokens.data(), 4)) << "the hash has its block";
  EXPECT_FALSE(pool.cache(b, 43, 7, tokens.data(), 4)) << "the block is cached already";
  EXPECT_EQ(pool.find(43), -1);
}

// Blocks 0 and 1 cached, released 1 then 0 (1 is the least recently used), block 2 released
// uncached: the free block goes first, then 1, then 0, each eviction making its hash unknown.
TEST(BlockPool, BlocksNoOneHoldsAreEvictedLeastRecentlyUsedAfterTheFreeOnes) {
  BlockPool pool(3, 1, true);
  const int32_t a = pool.take(), b = pool.take(), c = pool.take();
  const int32_t ta = 10, tb = 11;
  pool.cache(a, 100, 0, &ta, 0);
  pool.cache(b, 200, 0, &tb, 0);
  pool.release(b);
  pool.release(a);
  pool.release(c);
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.cached_blocks(), 2);
  EXPECT_EQ(pool.take(), c);
  EXPECT_EQ(pool.take(), b);
  EXPECT_EQ(pool.find(200), -1) << "evicted";
  EXPECT_EQ(pool.find(100), a);
  EXPECT_EQ(pool.evicted_blocks(), 1);
  EXPECT_EQ(pool.take(), a);
  EXPECT_EQ(pool.cached_blocks(), 0);
  EXPECT_EQ(pool.evicted_blocks(), 2);
}

TEST(BlockPool, ACachedBlockTakenAgainIsNotEvicted) {
  BlockPool pool(2, 1, true);
  const int32_t a = pool.take(), b = pool.take();
  const int32_t ta = 10, tb = 11;
  pool.cache(a, 100, 0, &ta, 0);
  pool.cache(b, 200, 0, &tb, 0);
  pool.release(a);  // a is the least recently used
  pool.release(b);
  pool.add_reference(a);  // found again by a sequence
  EXPECT_EQ(pool.available(), 1);
  EXPECT_EQ(pool.take(), b) << "a is held";
  EXPECT_EQ(pool.find(100), a);
}

TEST(BlockPool, CopyOnWriteCopiesOnlyASharedBlock) {
  BlockPool pool(4, 2, false);
  const int32_t b = pool.take();
  BlockPool::Write w = pool.copy_on_write(b);
  EXPECT_EQ(w.block, b) << "its only holder writes in place";
  EXPECT_EQ(w.copy_from, -1);

  pool.add_reference(b);  // a fork shares the partial block
  w = pool.copy_on_write(b);
  EXPECT_EQ(w.block, 1) << "the lowest free block";
  EXPECT_EQ(w.copy_from, b);
  EXPECT_EQ(pool.references(b), 1) << "the writer let go of the shared block";
  EXPECT_EQ(pool.references(1), 1);
  EXPECT_EQ(pool.available(), 2);
  w = pool.copy_on_write(b);
  EXPECT_EQ(w.block, b) << "the other holder is alone on it now";
  EXPECT_EQ(w.copy_from, -1);
}

TEST(BlockPool, CopyOnWriteNeverWritesACachedBlock) {
  BlockPool pool(2, 1, true);
  const int32_t b = pool.take();
  const int32_t token = 7;
  pool.cache(b, 70, 0, &token, 0);
  const BlockPool::Write w = pool.copy_on_write(b);
  EXPECT_EQ(w.block, 1);
  EXPECT_EQ(w.copy_from, b);
  EXPECT_EQ(pool.references(b), 0);
  EXPECT_EQ(pool.find(70), b) << "still findable, now evictable";
  EXPECT_EQ(pool.available(), 1);
}

}  // namespace
}  // namespace tpllama
