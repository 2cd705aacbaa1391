// The step plan's and the sampled rows' wire format: every message kind and every field come back
// as they were sent, the kind is the byte after the group id, and a byte of no kind, a message cut
// short, bytes left over or rows that do not match are refused.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "executor/step_plan.h"

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

RowSampling row_sampling(double temperature, int top_k, double uniform, int logprobs, int target) {
  RowSampling s;
  s.params.temperature = temperature;
  s.params.top_k = top_k;
  s.params.top_p = 0.875;
  s.params.min_p = 0.0625;
  s.params.seed = 0xFEDCBA9876543210ULL;
  s.uniform = uniform;
  s.logprobs = logprobs;
  s.target = target;
  return s;
}

// Two sequences: slot 3 decodes one token, slot 0 prefills three and wants the last one's logits.
StepPlan two_sequence_plan() {
  StepPlan plan;
  plan.group = (int64_t{1} << 40) + 7;  // beyond 32 bits
  plan.cache_ops = {{3, 17}, {0, CacheOp::kRelease}, {0, 4}};
  plan.batch.tokens = {1234, 1, 15043, -5};
  plan.batch.positions = {130, 0, 1, 2};
  plan.batch.slots = {3, 0, 0, 0};
  plan.batch.logit_rows = {0, 3};
  plan.sampling = {row_sampling(0.0, 0, 0.0, -1, -1), row_sampling(0.7, 40, 0.999999, 5, 29871)};
  return plan;
}

TEST(StepPlanWire, EveryFieldComesBackAsSent) {
  const StepPlan sent = two_sequence_plan();
  const StepPlan got = decode_plan(encode_plan(sent));
  EXPECT_EQ(got.group, (int64_t{1} << 40) + 7);
  ASSERT_EQ(got.cache_ops.size(), 3u);
  EXPECT_EQ(got.cache_ops[0].slot, 3);
  EXPECT_EQ(got.cache_ops[0].block, 17);
  EXPECT_EQ(got.cache_ops[1].slot, 0);
  EXPECT_EQ(got.cache_ops[1].block, CacheOp::kRelease);
  EXPECT_EQ(got.cache_ops[2].block, 4);
  EXPECT_EQ(got.batch.tokens, (std::vector<int32_t>{1234, 1, 15043, -5}));
  EXPECT_EQ(got.batch.positions, (std::vector<int32_t>{130, 0, 1, 2}));
  EXPECT_EQ(got.batch.slots, (std::vector<int32_t>{3, 0, 0, 0}));
  EXPECT_EQ(got.batch.logit_rows, (std::vector<int32_t>{0, 3}));
  ASSERT_EQ(got.sampling.size(), 2u);
  const RowSampling& greedy = got.sampling[0];
  EXPECT_EQ(greedy.params.temperature, 0.0);
  EXPECT_EQ(greedy.logprobs, -1);
  EXPECT_EQ(greedy.target, -1);
  const RowSampling& sampled = got.sampling[1];
  EXPECT_EQ(sampled.params.temperature, 0.7);  // doubles travel bit for bit
  EXPECT_EQ(sampled.params.top_k, 40);
  EXPECT_EQ(sampled.params.top_p, 0.875);
  EXPECT_EQ(sampled.params.min_p, 0.0625);
  EXPECT_EQ(sampled.params.seed, 0xFEDCBA9876543210ULL);
  EXPECT_EQ(sampled.uniform, 0.999999);
  EXPECT_EQ(sampled.logprobs, 5);
  EXPECT_EQ(sampled.target, 29871);
}

TEST(StepPlanWire, AnEmptyPlanComesBackEmpty) {
  StepPlan sent;
  sent.group = 0;
  const StepPlan got = decode_plan(encode_plan(sent));
  EXPECT_EQ(got.group, 0);
  EXPECT_TRUE(got.cache_ops.empty());
  EXPECT_EQ(got.batch.size(), 0u);
  EXPECT_TRUE(got.batch.tokens.empty());
  EXPECT_TRUE(got.batch.logit_rows.empty());
  EXPECT_TRUE(got.sampling.empty());
}

TEST(StepPlanWire, EveryMessageCutShortIsRefused) {
  const std::vector<uint8_t> bytes = encode_plan(two_sequence_plan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decode_plan(cut), Error) << "cut to " << n << " of " << bytes.size() << " bytes";
  }
}

TEST(StepPlanWire, BytesAfterThePlanAreRefused) {
  std::vector<uint8_t> bytes = encode_plan(two_sequence_plan());
  bytes.push_back(0);
  EXPECT_THROW(decode_plan(bytes), Error);
}

TEST(StepPlanWire, SamplingThatDoesNotMatchTheLogitRowsIsRefused) {
  StepPlan plan = two_sequence_plan();
  plan.sampling.pop_back();  // two logit rows, one way to sample them
  EXPECT_THROW(decode_plan(encode_plan(plan)), Error);
}

TEST(SampledRowsWire, TokensAndLogprobsComeBackAsSent) {
  SampledRows sent;
  sent.group = -3;
  sent.tokens = {42, kNonFiniteRow, 7};
  RowLogprobs l;
  l.row = 2;
  l.logprob = -0.125f;
  l.top_tokens = {7, 9, 11};
  l.top_logprobs = {-0.125f, -2.5f, -3.0f};
  l.rank = 4;
  sent.logprobs.push_back(l);
  sent.logprobs.push_back(RowLogprobs{0, -1.5f, {}, {}});

  const SampledRows got = decode_sampled(encode_sampled(sent));
  EXPECT_EQ(got.group, -3);
  EXPECT_EQ(got.tokens, (std::vector<int32_t>{42, -1, 7}));
  ASSERT_EQ(got.logprobs.size(), 2u);
  EXPECT_EQ(got.logprobs[0].row, 2);
  EXPECT_EQ(got.logprobs[0].logprob, -0.125f);
  EXPECT_EQ(got.logprobs[0].top_tokens, (std::vector<int32_t>{7, 9, 11}));
  EXPECT_EQ(got.logprobs[0].top_logprobs, (std::vector<float>{-0.125f, -2.5f, -3.0f}));
  EXPECT_EQ(got.logprobs[0].rank, 4);
  EXPECT_EQ(got.logprobs[1].row, 0);
  EXPECT_EQ(got.logprobs[1].logprob, -1.5f);
  EXPECT_TRUE(got.logprobs[1].top_tokens.empty());
}

TEST(SampledRowsWire, MoreLogprobRowsThanTokensAreRefused) {
  SampledRows sent;
  sent.tokens = {5};
  sent.logprobs = {RowLogprobs{0, -1.0f, {}, {}}, RowLogprobs{1, -2.0f, {}, {}}};
  EXPECT_THROW(decode_sampled(encode_sampled(sent)), Error);
}

TEST(SampledRowsWire, EveryMessageCutShortIsRefused) {
  SampledRows sent;
  sent.group = 1;
  sent.tokens = {3, 4};
  sent.logprobs = {RowLogprobs{1, -0.5f, {4}, {-0.5f}}};
  const std::vector<uint8_t> bytes = encode_sampled(sent);
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decode_sampled(cut), Error) << "cut to " << n << " of " << bytes.size();
  }
}

}  // namespace
}  // namespace tpllama
