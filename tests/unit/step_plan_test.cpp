// The step plan's wire format: every message kind and every field come back as they were sent, the
// kind is the byte after the group id, and a byte of no kind is refused.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "runtime/step_plan.h"

namespace tpllama {
namespace {

StepPlan full_plan(PlanKind kind) {
  StepPlan plan;
  plan.group = 0x0102030405060708LL;
  plan.kind = kind;
  plan.cache_ops = {{3, 17}, {1, CacheOp::kRelease}};
  plan.batch.tokens = {11, 12, 13};
  plan.batch.positions = {0, 1, 40};
  plan.batch.slots = {3, 3, 1};
  plan.batch.logit_rows = {1, 2};
  RowSampling greedy;
  greedy.logprobs = 2;
  RowSampling sampled;
  sampled.params.temperature = 0.7;
  sampled.uniform = 0.25;
  sampled.target = 9;
  plan.sampling = {greedy, sampled};
  return plan;
}

TEST(StepPlan, EveryKindRoundTripsWithItsFields) {
  for (PlanKind kind : {PlanKind::kStep, PlanKind::kShutdown, PlanKind::kKeepAlive}) {
    const StepPlan sent = full_plan(kind);
    const StepPlan got = decode_plan(encode_plan(sent));
    EXPECT_EQ(got.kind, kind);
    EXPECT_EQ(got.group, sent.group);
    ASSERT_EQ(got.cache_ops.size(), 2u);
    EXPECT_EQ(got.cache_ops[0].slot, 3);
    EXPECT_EQ(got.cache_ops[0].block, 17);
    EXPECT_EQ(got.cache_ops[1].block, CacheOp::kRelease);
    EXPECT_EQ(got.batch.tokens, sent.batch.tokens);
    EXPECT_EQ(got.batch.positions, sent.batch.positions);
    EXPECT_EQ(got.batch.slots, sent.batch.slots);
    EXPECT_EQ(got.batch.logit_rows, sent.batch.logit_rows);
    ASSERT_EQ(got.sampling.size(), 2u);
    EXPECT_EQ(got.sampling[0].logprobs, 2);
    EXPECT_EQ(got.sampling[1].params.temperature, 0.7);
    EXPECT_EQ(got.sampling[1].uniform, 0.25);
    EXPECT_EQ(got.sampling[1].target, 9);
  }
  const StepPlan empty = decode_plan(encode_plan(StepPlan{}));
  EXPECT_EQ(empty.kind, PlanKind::kStep) << "a plan is a step unless it says otherwise";
  EXPECT_TRUE(empty.batch.tokens.empty());
}

// The ranks of one run share the binary; the kind's byte values are those the flags had before
// (shutdown 1, keep-alive 2), so the message is the same bytes.
TEST(StepPlan, TheKindIsOneByteAfterTheGroup) {
  const std::vector<uint8_t> step = encode_plan(full_plan(PlanKind::kStep));
  const std::vector<uint8_t> shutdown = encode_plan(full_plan(PlanKind::kShutdown));
  const std::vector<uint8_t> keep_alive = encode_plan(full_plan(PlanKind::kKeepAlive));
  ASSERT_GT(step.size(), sizeof(int64_t));
  EXPECT_EQ(step[sizeof(int64_t)], 0);
  EXPECT_EQ(shutdown[sizeof(int64_t)], 1);
  EXPECT_EQ(keep_alive[sizeof(int64_t)], 2);
  EXPECT_EQ(step.size(), keep_alive.size()) << "the kind is one byte whatever it says";
}

TEST(StepPlan, AByteOfNoKindIsRefused) {
  std::vector<uint8_t> bytes = encode_plan(full_plan(PlanKind::kStep));
  bytes[sizeof(int64_t)] = 3;
  EXPECT_THROW(decode_plan(bytes), Error);
}

}  // namespace
}  // namespace tpllama
