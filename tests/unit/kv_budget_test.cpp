// The KV pool's block count from plain numbers, and its floor of one full-context sequence: every
// expected value below is worked out by hand from the rule (blocks = min(max_seqs × ⌈context /
// block⌉, budget ÷ bytes per block), budget = the request, else ⌊0.8 × free ÷ sharers⌋).
#include "session/kv_budget.h"
#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace tpllama {
namespace {

KvBudget budget(uint64_t per_block, uint64_t requested, uint64_t free, int sharers, int max_seqs,
                int context, int block_size) {
  return KvBudget{per_block, requested, free, sharers, max_seqs, context, block_size};
}

TEST(KvBlocksPerSequence, TakesWholeBlocks) {
  EXPECT_EQ(blocks_per_sequence(16, 16), 1);
  EXPECT_EQ(blocks_per_sequence(17, 16), 2);
  EXPECT_EQ(blocks_per_sequence(1, 16), 1);
  EXPECT_EQ(blocks_per_sequence(100, 16), 7);  // 6 blocks hold 96
  EXPECT_EQ(blocks_per_sequence(4096, 1), 4096);
}

TEST(KvDefaultBlockSize, SixtyFourOnACpuSixteenOnAGpuNeverPastTheContext) {
  EXPECT_EQ(default_kv_block_size(false, 2048), 64);
  EXPECT_EQ(default_kv_block_size(false, 65), 64);
  EXPECT_EQ(default_kv_block_size(false, 40), 40);
  EXPECT_EQ(default_kv_block_size(true, 2048), 16);
  EXPECT_EQ(default_kv_block_size(true, 9), 9);
  EXPECT_EQ(default_kv_block_size(false, 1), 1);
}

TEST(KvBlocksFor, AnExplicitBudgetHoldsWholeBlocksOnly) {
  // 10 500 bytes of 1 000-byte blocks: 10 (half a block is no block); 64 × 16 = 1 024 allowed.
  EXPECT_EQ(kv_blocks_for(budget(1000, 10500, 0, 1, 64, 256, 16)), 10);
  // Free memory and sharers do not shrink an explicit budget (it is checked against them apart).
  EXPECT_EQ(kv_blocks_for(budget(1000, 10500, 2000, 4, 64, 256, 16)), 10);
}

TEST(KvBlocksFor, NeverMoreThanEverySlotAtFullContext) {
  // 10^9 bytes would hold 10^6 blocks, but 4 sequences of ⌈100 / 16⌉ = 7 blocks need 28.
  EXPECT_EQ(kv_blocks_for(budget(1000, 1000000000, 0, 1, 4, 100, 16)), 28);
}

TEST(KvBlocksFor, WithoutARequestTakesEightyPercentOfTheFreeShare) {
  // 0.8 × 10 000 / 2 sharers = 4 000 bytes: 4 blocks of 1 000.
  EXPECT_EQ(kv_blocks_for(budget(1000, 0, 10000, 2, 64, 16, 16)), 4);
  // 0.8 × 1 001 = 800.8 → 800 bytes: 8 blocks of 100.
  EXPECT_EQ(kv_blocks_for(budget(100, 0, 1001, 1, 64, 16, 16)), 8);
  // Nothing free, nothing asked: no blocks (the floor check then refuses the run).
  EXPECT_EQ(kv_blocks_for(budget(100, 0, 0, 1, 64, 16, 16)), 0);
}

TEST(KvFitsFreeMemory, PassesWithoutARequestOrAKnownFreeMemory) {
  // 100 blocks of 1 000 bytes against 10 000 free: only an explicit budget is held to it.
  EXPECT_NO_THROW(check_kv_fits_free_memory(budget(1000, 0, 10000, 1, 64, 16, 16), 100, "", 0));
  EXPECT_NO_THROW(
      check_kv_fits_free_memory(budget(1000, 100000, 0, 1, 64, 16, 16), 100, "100000", 0));
  // 10 blocks of 1 000 bytes fit 10 000 free exactly.
  EXPECT_NO_THROW(
      check_kv_fits_free_memory(budget(1000, 10000, 10000, 1, 64, 16, 16), 10, "10000", 0));
}

TEST(KvFitsFreeMemory, NamesTheRequestTheRankAndBothSizes) {
  try {
    // 2 MiB asked for; 4 MiB free over 4 sharers leaves this rank 1 MiB.
    check_kv_fits_free_memory(budget(1 << 20, 2 << 20, 4 << 20, 4, 64, 16, 16), 2, "2MiB", 3);
    FAIL() << "2 MiB of blocks exceed a 1 MiB share";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--kv-cache-memory 2MiB: rank 3 would hold a KV cache of 2.00 MiB but has 1.00 MiB "
              "of free memory left after the weights: give a smaller --kv-cache-memory, or leave "
              "it out to use 80% of what is free");
  }
}

TEST(KvHoldsOneSequence, AcceptsExactlyOneFullContext) {
  EXPECT_NO_THROW(check_kv_holds_one_sequence(2, 16, 17, "", "--max-model-len"));
  EXPECT_NO_THROW(check_kv_holds_one_sequence(1, 16, 16, "", "--max-model-len"));
}

TEST(KvHoldsOneSequence, NamesTheCountTheNeedAndTheFlag) {
  try {
    check_kv_holds_one_sequence(1, 16, 17, " on the smallest rank", "--context-len");
    FAIL() << "one block of 16 holds no 17-token sequence";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the KV cache holds 1 blocks of 16 tokens on the smallest rank, less than one "
              "17-token sequence needs (2): give more --kv-cache-memory or a smaller "
              "--context-len");
  }
}

}  // namespace

// Sequences a pool holds take whole blocks: ceil(tokens / block) each, never fewer than one.
TEST(KvBudget, SequencesTakeWholeBlocks) {
  EXPECT_DOUBLE_EQ(sequences_held(2, 1000, 512), 2.0);  // a block each, not 2000 / 512
  EXPECT_DOUBLE_EQ(sequences_held(64, 16, 512), 2.0);   // 32 blocks each
  EXPECT_DOUBLE_EQ(sequences_held(64, 16, 33), 64.0 / 3.0);
  EXPECT_DOUBLE_EQ(sequences_held(10, 16, 0), 10.0);
}

}  // namespace tpllama
