// Logit edits: a sequence's LogitRules made one edit per token (closed forms of OpenAI's and vLLM's
// definitions), the edits applied by ops::edit_logits, and their trip through a step plan.
#include "runtime/logit_edits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "ops/sampling.h"
#include "runtime/step_plan.h"

namespace tpllama {
namespace {

// The edit the row holds for each token.
std::map<int32_t, LogitEdit> by_token(const std::vector<LogitEdit>& edits) {
  std::map<int32_t, LogitEdit> m;
  for (const LogitEdit& e : edits) {
    EXPECT_TRUE(m.emplace(e.token, e).second) << "token " << e.token << " edited twice";
  }
  return m;
}

TEST(LogitEdits, NoRulesNoEdits) {
  const LogitRules none;
  PenaltyCounts counts(none, std::vector<int32_t>{5, 6, 7});
  counts.add_generated(5);
  std::vector<LogitEdit> out;
  counts.append_edits(none, 0, {}, &out);
  EXPECT_TRUE(out.empty());
}

TEST(LogitEdits, PenaltiesCountTheCompletionAndTheRepetitionPenaltyThePromptToo) {
  LogitRules r;
  r.presence_penalty = 0.5;
  r.frequency_penalty = 0.25;
  r.repetition_penalty = 1.5;
  PenaltyCounts counts(r, std::vector<int32_t>{3, 4, 3});
  for (int32_t t : {4, 9, 9, 9}) counts.add_generated(t);
  std::vector<LogitEdit> out;
  counts.append_edits(r, 7, {}, &out);
  const auto m = by_token(out);
  ASSERT_EQ(m.size(), 3u);
  // 3: prompt only; 4: prompt and once generated; 9: three times generated.
  EXPECT_FLOAT_EQ(m.at(3).scale, 1.5f);
  EXPECT_FLOAT_EQ(m.at(3).subtract, 0.0f);
  EXPECT_FLOAT_EQ(m.at(4).subtract, 0.25f * 1 + 0.5f);
  EXPECT_FLOAT_EQ(m.at(9).subtract, 0.25f * 3 + 0.5f);
  for (const auto& [token, e] : m) {
    EXPECT_EQ(e.row, 7);
    EXPECT_FLOAT_EQ(e.bias, 0.0f);
  }
}

TEST(LogitEdits, WithoutARepetitionPenaltyThePromptAddsNoEdit) {
  LogitRules r;
  r.frequency_penalty = 1.0;
  PenaltyCounts counts(r, std::vector<int32_t>{3, 4});
  counts.add_generated(8);
  std::vector<LogitEdit> out;
  counts.append_edits(r, 0, {}, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, 8);
  EXPECT_FLOAT_EQ(out[0].subtract, 1.0f);
}

TEST(LogitEdits, BiasPenaltyAndBanOfOneTokenAreOneEdit) {
  LogitRules r;
  r.repetition_penalty = 2.0;
  r.logit_bias = {{2, 3.0f}, {11, -100.0f}};
  PenaltyCounts counts(r, std::vector<int32_t>{2});
  std::vector<LogitEdit> out = {{0, 99, 1.0f, 1.0f, 0.0f}};  // an earlier row's edit stays
  const std::vector<int32_t> banned = {2, 5};
  counts.append_edits(r, 1, banned, &out);
  ASSERT_EQ(out.front().token, 99);
  const auto m = by_token(std::vector<LogitEdit>(out.begin() + 1, out.end()));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(std::isinf(m.at(2).bias) && m.at(2).bias < 0);  // banned wins over its bias
  EXPECT_FLOAT_EQ(m.at(2).scale, 2.0f);
  EXPECT_TRUE(std::isinf(m.at(5).bias) && m.at(5).bias < 0);
  EXPECT_FLOAT_EQ(m.at(11).bias, -100.0f);
}

TEST(LogitEdits, EditLogitsAppliesBiasThenScaleThenSubtract) {
  std::vector<float> logits = {1.0f, -2.0f, 3.0f, 0.5f, 4.0f, -1.0f};  // 2 rows × 3
  std::vector<int32_t> cells = {0, 0, 0, 1, 1, 1, 1, 2};
  std::vector<float> params = {0.0f,      2.0f, 0.0f,   // 1 / 2
                               0.0f,      2.0f, 0.5f,   // -2 × 2 - 0.5
                               -5.0f,     1.5f, 0.0f,   // (4 - 5) × 1.5
                               -INFINITY, 1.0f, 0.0f};  // banned
  DeviceContext cpu;
  ops::edit_logits(cpu, Tensor(logits.data(), DType::kF32, {2, 3}),
                   Tensor(cells.data(), DType::kI32, {4, 2}),
                   Tensor(params.data(), DType::kF32, {4, 3}));
  EXPECT_FLOAT_EQ(logits[0], 0.5f);
  EXPECT_FLOAT_EQ(logits[1], -4.5f);
  EXPECT_FLOAT_EQ(logits[2], 3.0f);
  EXPECT_FLOAT_EQ(logits[3], 0.5f);
  EXPECT_FLOAT_EQ(logits[4], -1.5f);
  EXPECT_TRUE(std::isinf(logits[5]) && logits[5] < 0);
}

TEST(LogitEdits, EditsTravelWithThePlanAndAForeignRowIsRefused) {
  StepPlan plan;
  plan.batch.tokens = {1, 2};
  plan.batch.positions = {0, 1};
  plan.batch.slots = {0, 0};
  plan.batch.logit_rows = {1};
  plan.sampling.resize(1);
  plan.edits = {{0, 7, 1.5f, 1.25f, 0.75f}, {0, 9, -INFINITY, 1.0f, 0.0f}};
  const StepPlan back = decode_plan(encode_plan(plan));
  ASSERT_EQ(back.edits.size(), 2u);
  EXPECT_EQ(back.edits[0].token, 7);
  EXPECT_FLOAT_EQ(back.edits[0].bias, 1.5f);
  EXPECT_FLOAT_EQ(back.edits[0].scale, 1.25f);
  EXPECT_FLOAT_EQ(back.edits[0].subtract, 0.75f);
  EXPECT_TRUE(std::isinf(back.edits[1].bias));
  plan.edits[1].row = 1;  // there is one logit row
  EXPECT_THROW(decode_plan(encode_plan(plan)), Error);
}

}  // namespace
}  // namespace tpllama
