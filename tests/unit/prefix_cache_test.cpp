// The prefix cache in the BlockAllocator, on hand-made sequences: blocks found by a hash chain over
// their tokens (equal chains share, a different earlier block does not), reference counts, eviction
// least recently used and only of blocks no sequence holds, the last prompt token always computed
// again, a partial block never shared, and a block written by the group being planned not read by
// it.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine_test_util.h"

namespace tpllama {
namespace {

constexpr int kBlock = 4;

// A sequence holding `tokens` as its prompt, in a slot of `a`.
std::unique_ptr<Sequence> sequence(BlockAllocator& a, std::vector<int32_t> tokens,
                                   bool scoring = false, int n_context = 0) {
  Request r;
  r.token_ids.assign(tokens.begin(), tokens.end());
  r.scoring = scoring;
  auto s = testing_util::make_sequence(r, std::move(tokens), n_context);
  s->assign_slot(a.acquire_slot());
  return s;
}

// As the scheduler does for one sequence in group `group`: attach what the cache holds, reserve the
// rest, register its full blocks; then the group comes back (its positions are computed).
int run_step(BlockAllocator& a, Sequence& s, int64_t group) {
  a.begin_group(group);
  const int hit = a.attach_cached_prefix(s);
  s.skip_cached(hit);
  if (const int take = a.reserve(s, s.pending()); take > 0) {  // 0: no block for it
    s.start_step(take);
    a.register_full_blocks(s);
    s.end_step();
  }
  return hit;
}

std::vector<int32_t> iota_tokens(int n, int first = 10) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

TEST(PrefixCache, EqualChainsShareTheirBlocksAndCountReferences) {
  BlockAllocator a(16, kBlock, 4, true);
  auto first = sequence(a, iota_tokens(10));
  EXPECT_EQ(run_step(a, *first, 0), 0);
  EXPECT_EQ(a.cached_blocks(), 2);  // positions 0-7; the third block holds 2 of 4
  auto second = sequence(a, iota_tokens(11));
  EXPECT_EQ(run_step(a, *second, 1), 8);
  EXPECT_EQ(a.table(second->counts().slot)[0], a.table(first->counts().slot)[0]);
  EXPECT_EQ(a.table(second->counts().slot)[1], a.table(first->counts().slot)[1]);
  EXPECT_NE(a.table(second->counts().slot)[2],
            a.table(first->counts().slot)[2]);  // the partial block is never shared
  EXPECT_EQ(a.references(a.table(first->counts().slot)[0]), 2);
  a.release_slot(first->counts().slot);
  EXPECT_EQ(a.references(a.table(second->counts().slot)[0]), 1);
  EXPECT_EQ(a.prefix_stats().prompt_tokens, 21);
  EXPECT_EQ(a.prefix_stats().hit_tokens, 8);
}

TEST(PrefixCache, ADifferentEarlierBlockBreaksTheChain) {
  BlockAllocator a(16, kBlock, 4, true);
  auto first = sequence(a, iota_tokens(13));
  run_step(a, *first, 0);
  // Same second and third blocks, another first block: nothing matches, though blocks 1-2 equal.
  std::vector<int32_t> other = iota_tokens(13);
  other[0] = 99;
  auto second = sequence(a, other);
  EXPECT_EQ(run_step(a, *second, 1), 0);
  // Same first block, another second: only the first.
  std::vector<int32_t> fork = iota_tokens(13);
  fork[5] = 99;
  auto third = sequence(a, fork);
  EXPECT_EQ(run_step(a, *third, 2), 4);
}

TEST(PrefixCache, TheLastPromptTokenIsAlwaysComputedAgain) {
  BlockAllocator a(16, kBlock, 4, true);
  auto first = sequence(a, iota_tokens(8));
  run_step(a, *first, 0);
  EXPECT_EQ(a.cached_blocks(), 2);
  auto same = sequence(a, iota_tokens(8));  // both blocks cached, but position 7 needs its logits
  EXPECT_EQ(run_step(a, *same, 1), 4);
  EXPECT_EQ(same->counts().computed, 8);
  auto longer = sequence(a, iota_tokens(9));
  EXPECT_EQ(run_step(a, *longer, 2), 8);
}

TEST(PrefixCache, AScoringRequestRecomputesFromItsFirstScoredPosition) {
  BlockAllocator a(16, kBlock, 4, true);
  auto context = sequence(a, iota_tokens(16));
  run_step(a, *context, 0);
  // Context of 9 tokens, continuation of 7: position 8 predicts the first continuation token.
  auto scored = sequence(a, iota_tokens(16), /*scoring=*/true, /*n_context=*/9);
  EXPECT_EQ(run_step(a, *scored, 1), 8);
}

TEST(PrefixCache, ABlockBeingWrittenByTheGroupIsNotReadByIt) {
  BlockAllocator a(16, kBlock, 4, true);
  auto writer = sequence(a, iota_tokens(10));
  auto reader = sequence(a, iota_tokens(10));
  a.begin_group(0);
  a.attach_cached_prefix(*writer);
  writer->start_step(a.reserve(*writer, writer->pending()));
  a.register_full_blocks(*writer);
  EXPECT_TRUE(a.first_block_being_written(*reader));
  EXPECT_EQ(a.attach_cached_prefix(*reader), 0) << "read in the group that writes it";
  EXPECT_TRUE(a.table(reader->counts().slot).empty());
  a.begin_group(1);  // a later group runs after the writer's on every stage
  EXPECT_FALSE(a.first_block_being_written(*reader));
  EXPECT_EQ(a.attach_cached_prefix(*reader), 8);
}

TEST(PrefixCache, BlocksNoSequenceHoldsAreEvictedLeastRecentlyUsedFirst) {
  BlockAllocator a(6, kBlock, 4, true);
  auto older = sequence(a, iota_tokens(8, 100));
  run_step(a, *older, 0);
  auto newer = sequence(a, iota_tokens(8, 200));
  run_step(a, *newer, 1);
  a.release_slot(older->counts().slot);  // older's blocks are used least recently
  a.release_slot(newer->counts().slot);
  EXPECT_EQ(a.free_blocks(), 6);
  EXPECT_EQ(a.cached_blocks(), 4);
  // 3 blocks: the 2 free ones, then the least recently used cached one: older's last (a sequence's
  // blocks are released last first, so a chain loses its tail before its head).
  auto big = sequence(a, iota_tokens(12, 300));
  run_step(a, *big, 2);
  EXPECT_EQ(a.prefix_stats().evicted_blocks, 1);
  auto again_older = sequence(a, iota_tokens(9, 100));
  EXPECT_EQ(run_step(a, *again_older, 3), 4)
      << "older's first block is still cached, its second is not";
  // It needed 2 more blocks: newer's, least recently used now.
  EXPECT_EQ(a.prefix_stats().evicted_blocks, 3);
  auto again_newer = sequence(a, iota_tokens(9, 200));
  EXPECT_EQ(run_step(a, *again_newer, 4), 0);
}

TEST(PrefixCache, AHeldBlockIsNeverEvicted) {
  BlockAllocator a(4, kBlock, 4, true);
  auto holder = sequence(a, iota_tokens(8));
  run_step(a, *holder, 0);  // holds 2 cached blocks
  auto other = sequence(a, iota_tokens(8, 50));
  run_step(a, *other, 1);  // takes the 2 free blocks
  auto third = sequence(a, iota_tokens(4, 90));
  a.begin_group(2);
  EXPECT_EQ(a.shortfall(*third, third->pending()), 1);
  EXPECT_EQ(a.reserve(*third, third->pending()), 0) << "only held blocks remain";
  EXPECT_EQ(a.prefix_stats().evicted_blocks, 0);
  a.release_slot(other->counts().slot);
  EXPECT_EQ(a.reserve(*third, third->pending()), 4);
  for (int32_t b : a.table(third->counts().slot))
    for (int32_t held : a.table(holder->counts().slot)) EXPECT_NE(b, held);
}

// With a budget for one of two prompts, the newer one whose prefix is cached goes first; with the
// cache off, admission order decides; a prompt passed over kPatience groups goes first again.
TEST(PrefixCache, APromptWithACachedPrefixGoesFirstWithinPatience) {
  for (const bool caching : {true, false}) {
    BlockAllocator a(64, kBlock, 8, caching);
    auto seed = sequence(a, iota_tokens(9));
    run_step(a, *seed, /*group=*/-2);  // before the scheduler's first group, 0
    a.release_slot(seed->counts().slot);
    ActiveSequences active;
    active.push_back(sequence(a, iota_tokens(12, 500)));  // older: nothing cached
    active.push_back(sequence(a, iota_tokens(12)));       // newer: its first 8 tokens are cached
    Scheduler scheduler(
        {/*max_batch_tokens=*/4, /*max_logit_rows=*/8, /*max_seqs=*/8, /*groups=*/1}, a);
    std::optional<StepPlan> plan = scheduler.schedule(active);
    ASSERT_TRUE(plan.has_value());
    EXPECT_EQ(plan->batch.slots.front(), active[caching ? 1 : 0]->counts().slot)
        << (caching ? "cache on" : "cache off");
    EXPECT_EQ(scheduler.passed_over(*active[0]), caching ? 1 : 0);
  }
  // An uncached prompt behind newer cached ones, 4 tokens a group: passed over kPatience groups,
  // it goes before the cached prompts still waiting.
  BlockAllocator a(64, kBlock, 8, true);
  auto seed = sequence(a, iota_tokens(9));
  run_step(a, *seed, -2);
  a.release_slot(seed->counts().slot);
  ActiveSequences active;
  active.push_back(sequence(a, iota_tokens(12, 500)));
  for (int i = 0; i < 6; ++i) active.push_back(sequence(a, iota_tokens(12)));
  Scheduler scheduler({4, 8, 8, 1}, a);
  for (int group = 0; group < Scheduler::kPatience; ++group) {
    std::optional<StepPlan> plan = scheduler.schedule(active);
    ASSERT_TRUE(plan.has_value());
    for (const int32_t slot : plan->batch.slots) ASSERT_NE(slot, active[0]->counts().slot);
    EXPECT_EQ(scheduler.passed_over(*active[0]), group + 1);
    SampledRows rows;
    rows.group = plan->group;
    rows.tokens.assign(plan->batch.logit_rows.size(), 7);
    (void)scheduler.apply(scheduler.take_oldest(), rows);
  }
  std::optional<StepPlan> plan = scheduler.schedule(active);
  ASSERT_TRUE(plan.has_value());
  const std::vector<int32_t>& slots = plan->batch.slots;
  EXPECT_NE(std::find(slots.begin(), slots.end(), active[0]->counts().slot), slots.end())
      << "passed over long enough: its turn";
  EXPECT_EQ(std::find(slots.begin(), slots.end(), active.back()->counts().slot), slots.end())
      << "the youngest cached prompt waits behind it";
  EXPECT_EQ(scheduler.passed_over(*active[0]), 0);
}

TEST(PrefixCache, OffMeansNothingIsShared) {
  BlockAllocator a(16, kBlock, 4, false);
  auto first = sequence(a, iota_tokens(10));
  run_step(a, *first, 0);
  auto second = sequence(a, iota_tokens(10));
  EXPECT_EQ(run_step(a, *second, 1), 0);
  EXPECT_EQ(a.cached_blocks(), 0);
  a.release_slot(first->counts().slot);
  EXPECT_EQ(a.free_blocks(), 13);
}

}  // namespace
}  // namespace tpllama
