// A sequence's states: the moves the scheduler makes (admission, a step out and back, preemption,
// the finish), the moves no state allows, the finish reasons as records spell them, and the
// scheduler making each move on a plan and its tokens.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "engine/block_allocator.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine_test_util.h"

namespace tpllama {
namespace {

using testing_util::OutputSide;

const StopRules kRules{{2}, 64};

std::unique_ptr<Sequence> sequence(std::vector<int32_t> prompt, int max_tokens = 4,
                                   bool scoring = false, int n_context = 0) {
  Request r;
  r.token_ids.assign(prompt.begin(), prompt.end());
  r.max_tokens = max_tokens;
  r.scoring = scoring;
  return testing_util::make_sequence(r, std::move(prompt), n_context);
}

TEST(SequenceState, AStepGoesOutAndComesBackComputed) {
  auto s = sequence({1, 5, 6, 7});
  EXPECT_EQ(s->state(), SequenceState::kWaiting);
  s->assign_slot(3);
  EXPECT_EQ(s->counts().slot, 3);
  s->start_step(3);
  EXPECT_EQ(s->state(), SequenceState::kInFlight);
  EXPECT_EQ(s->counts().computed, 0) << "computed only once the group comes back";
  EXPECT_EQ(s->counts().scheduled, 3);
  s->end_step();
  EXPECT_EQ(s->state(), SequenceState::kRunning);
  EXPECT_EQ(s->counts().computed, 3);
  EXPECT_EQ(s->counts().scheduled, 0);
  EXPECT_EQ(s->pending(), 1);
  EXPECT_FALSE(s->counts().decoding());
}

TEST(SequenceState, APreemptedSequenceComputesEverythingAgain) {
  auto s = sequence({1, 5, 6, 7});
  s->start_step(4);
  s->end_step();
  s->append_token(9);
  EXPECT_EQ(s->counts().generated, 1);
  ASSERT_TRUE(s->counts().decoding());
  s->preempt();
  EXPECT_EQ(s->state(), SequenceState::kPreempted);
  EXPECT_EQ(s->counts().computed, 0);
  EXPECT_EQ(s->pending(), 5) << "the prompt and the token sampled";
  EXPECT_THROW(s->append_token(3), Error) << "a token before its pending positions are computed";
  s->skip_cached(4);  // the prefix cache holds its first block
  EXPECT_EQ(s->counts().computed, 4);
  s->start_step(1);
  EXPECT_EQ(s->state(), SequenceState::kInFlight);
}

TEST(SequenceState, MovesNoStateAllowsAreRefused) {
  auto s = sequence({1, 5, 6});
  EXPECT_THROW(s->end_step(), Error) << "not in flight";
  EXPECT_THROW(s->start_step(4), Error) << "more than its 3 pending positions";
  s->assign_slot(0);
  EXPECT_THROW(s->assign_slot(1), Error) << "a slot already";
  s->start_step(3);
  EXPECT_THROW(s->start_step(1), Error) << "in flight already";
  EXPECT_THROW(s->preempt(), Error) << "its group is being computed";
  EXPECT_THROW(s->skip_cached(1), Error);
  s->end_step();
  OutputSide out(kRules);
  out.take(out.open(*s), 2);  // EOS
  EXPECT_EQ(s->state(), SequenceState::kFinished);
  EXPECT_THROW(s->start_step(1), Error) << "finished";
  EXPECT_THROW(s->preempt(), Error) << "finished";
}

TEST(SequenceState, FinishReasonsSpellAsTheRecordsHaveThem) {
  EXPECT_STREQ(finish_reason_name(FinishReason::kNone), "");
  EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::kScore), "score");
  EXPECT_STREQ(finish_reason_name(FinishReason::kError), "error");
  auto s = sequence({1, 5}, /*max_tokens=*/1);
  OutputSide out(kRules);
  out.take(out.open(*s), 7);
  EXPECT_EQ(s->finish_reason(), FinishReason::kLength);
  EXPECT_EQ(out.record(*s).finish_reason, "length");
}

// A generation of 1 token and a scoring request of a 2-token context and 2-token continuation in
// one group: admitted waiting, planned in flight, finished by the group's tokens ("length" after
// max_tokens 1; "score" once every position is computed).
TEST(SequenceState, TheSchedulerMakesEachMove) {
  BlockAllocator blocks(16, 4, 4);
  Scheduler scheduler({64, 8, 4, 1}, blocks);
  ActiveSequences active;
  active.push_back(sequence({1, 5, 6}, /*max_tokens=*/1));
  active.push_back(sequence({1, 5, 6, 7}, 0, /*scoring=*/true, /*n_context=*/2));
  OutputSide out(kRules);
  for (auto& s : active) out.open(*s);
  for (auto& s : active) scheduler.admit(*s);
  EXPECT_EQ(active[0]->counts().slot, 0);
  EXPECT_EQ(active[1]->counts().slot, 1);
  EXPECT_EQ(active[0]->state(), SequenceState::kWaiting);
  std::optional<StepPlan> plan = scheduler.schedule(active);
  ASSERT_TRUE(plan.has_value());
  for (auto& s : active) EXPECT_EQ(s->state(), SequenceState::kInFlight);
  ASSERT_EQ(plan->batch.logit_rows.size(), 3u)
      << "the generation's last position; positions 1 and 2 scored";
  SampledRows rows;
  rows.group = plan->group;
  rows.tokens = {9, 6, 7};
  rows.logprobs = {{1, -0.5f, {}, {}}, {2, -0.25f, {}, {}}};
  out.apply(scheduler, scheduler.take_oldest(), rows);
  EXPECT_EQ(active[0]->finish_reason(), FinishReason::kLength);
  EXPECT_EQ(active[1]->finish_reason(), FinishReason::kScore);
  for (auto& s : active) EXPECT_EQ(s->state(), SequenceState::kFinished);
  EXPECT_EQ(out.record(*active[1]).score->logprob, -0.75);
  for (auto& s : active) scheduler.retire(*s);
  EXPECT_EQ(blocks.free_blocks(), 16);
}

// prompt_logprobs: each prompt position but the last is a scored row (its next token the target,
// k top ones asked for), then the last gives the sampled token; a step too small for every row
// takes fewer positions, and the rows come back in order across groups.
TEST(SequenceState, APromptAskingForItsLogprobsScoresEachPositionThenSamples) {
  BlockAllocator blocks(16, 4, 2);
  Scheduler scheduler({64, /*rows=*/3, 2, 1}, blocks);
  ActiveSequences active;
  Request r;
  r.token_ids = {1, 5, 6, 7, 8};
  r.max_tokens = 1;
  r.prompt_logprobs = 2;
  active.push_back(testing_util::make_sequence(r, {1, 5, 6, 7, 8}));
  Sequence& s = *active[0];
  OutputSide out(kRules);
  out.open(s);
  scheduler.admit(s);
  std::optional<StepPlan> first = scheduler.schedule(active);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->batch.size(), 3u) << "three rows: positions 0, 1 and 2";
  ASSERT_EQ(first->sampling.size(), 3u);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(first->sampling[static_cast<size_t>(p)].target,
              r.token_ids[static_cast<size_t>(p) + 1]);
    EXPECT_EQ(first->sampling[static_cast<size_t>(p)].logprobs, 2);
  }
  SampledRows rows;
  rows.group = first->group;
  rows.tokens = {5, 9, 9};
  for (int32_t p = 0; p < 3; ++p)
    rows.logprobs.push_back({p, -0.5f * (p + 1), {9, 5}, {-0.1f, -0.2f}, p + 1});
  out.apply(scheduler, scheduler.take_oldest(), rows);
  EXPECT_EQ(prompt_rows_left(s), 1);
  EXPECT_EQ(s.counts().generated, 0);
  std::optional<StepPlan> second = scheduler.schedule(active);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->batch.size(), 2u);
  ASSERT_EQ(second->sampling.size(), 2u) << "position 3 scored, position 4 sampled";
  EXPECT_EQ(second->sampling[0].target, 8);
  EXPECT_EQ(second->sampling[1].target, -1);
  rows.group = second->group;
  rows.tokens = {8, 11};
  rows.logprobs = {{0, -2.0f, {8}, {-2.0f}, 1}};
  out.apply(scheduler, scheduler.take_oldest(), rows);
  EXPECT_EQ(prompt_rows_left(s), 0);
  EXPECT_EQ(s.tokens().back(), 11);
  ASSERT_EQ(s.finish_reason(), FinishReason::kLength) << "its one token";
  const Result result = out.record(s);
  ASSERT_TRUE(result.prompt_logprobs.has_value());
  ASSERT_EQ(result.prompt_logprobs->size(), 4u);
  const PositionLogprobs& at0 = (*result.prompt_logprobs)[0];
  ASSERT_EQ(at0.size(), 3u) << "the prompt's token, then the two best";
  EXPECT_EQ(at0[0].token, 5);
  EXPECT_EQ(at0[0].rank, 1);
  EXPECT_FLOAT_EQ(static_cast<float>(at0[0].logprob), -0.5f);
  EXPECT_EQ(at0[1].token, 9);
  EXPECT_EQ(at0[2].rank, 2);
  EXPECT_EQ((*result.prompt_logprobs)[3][0].token, 8);
}

}  // namespace
}  // namespace tpllama
