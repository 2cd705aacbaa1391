// Logit edits: a sequence's LogitRules made one edit per token (closed forms of OpenAI's and vLLM's
// definitions), the edits applied by ops::edit_logits, and their trip through a step plan; and the
// grammar masks the head applies after them.
#include "engine/logit_edits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/device_context.h"
#include "core/error.h"
#include "executor/step_plan.h"
#include "ops/sampling.h"

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

// A plan of two positions of one sequence and one logit row.
StepPlan one_row_plan() {
  StepPlan plan;
  plan.batch.tokens = {1, 2};
  plan.batch.positions = {0, 1};
  plan.batch.slots = {0, 0};
  plan.batch.logit_rows = {1};
  plan.sampling.resize(1);
  return plan;
}

TEST(LogitEdits, EditsTravelWithThePlanAndAForeignRowIsRefused) {
  StepPlan plan = one_row_plan();
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

// Grammar masks as the head applies them: ops::mask_logits against the definition (a token keeps
// its logit exactly when its bit is set, a TP slice reading the bits of its own token ids), and
// their trip through a step plan.
TEST(TokenMasks, MaskLogitsKeepsExactlyTheAllowedTokensOfTheSlice) {
  const int64_t rows = 3, cols = 70, first = 10, width = 3;  // tokens 10..79 of a 96-bit mask
  std::vector<float> logits(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const std::vector<float> before = logits;
  std::vector<int32_t> masked_rows = {2, 0};
  std::vector<uint32_t> words(static_cast<size_t>(2 * width), 0);
  const auto allow = [&](int i, int t) {
    words[static_cast<size_t>(i * width + t / 32)] |= 1u << (t % 32);
  };
  for (const int t : {10, 31, 32, 63, 64, 79, 95}) allow(0, t);  // row 2
  for (const int t : {0, 9, 45}) allow(1, t);                    // row 0: 0 and 9 are not here
  ops::mask_logits(DeviceContext{}, Tensor(logits.data(), DType::kF32, {rows, cols}),
                   Tensor(masked_rows.data(), DType::kI32, {2}),
                   Tensor(reinterpret_cast<int32_t*>(words.data()), DType::kI32, {2, width}),
                   first);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int t = static_cast<int>(first + c);
      const size_t at = static_cast<size_t>(r * cols + c);
      const bool kept =
          r == 1 || (r == 2 && (t == 10 || t == 31 || t == 32 || t == 63 || t == 64 || t == 79)) ||
          (r == 0 && t == 45);
      if (kept)
        EXPECT_EQ(logits[at], before[at]) << "row " << r << " token " << t;
      else
        EXPECT_EQ(logits[at], -INFINITY) << "row " << r << " token " << t;
    }
  // A slice past the mask's words: every token is disallowed.
  std::vector<float> far(4, 1.0f);
  std::vector<int32_t> one = {0};
  ops::mask_logits(DeviceContext{}, Tensor(far.data(), DType::kF32, {1, 4}),
                   Tensor(one.data(), DType::kI32, {1}),
                   Tensor(reinterpret_cast<int32_t*>(words.data()), DType::kI32, {1, width}), 200);
  for (const float x : far) EXPECT_EQ(x, -INFINITY);
}

TEST(TokenMasks, TravelWithThePlanAndAreChecked) {
  StepPlan plan = one_row_plan();
  plan.masks.width = 2;
  plan.masks.rows = {0};
  plan.masks.words = {0x80000001u, 0xFFFFFFFFu};
  const StepPlan got = decode_plan(encode_plan(plan));
  EXPECT_EQ(got.masks.width, 2);
  EXPECT_EQ(got.masks.rows, plan.masks.rows);
  EXPECT_EQ(got.masks.words, plan.masks.words);
  plan.masks.rows = {1};  // a row the plan does not have
  EXPECT_THROW(decode_plan(encode_plan(plan)), Error);
  plan.masks.rows = {0};
  plan.masks.words.pop_back();  // a row cut short
  EXPECT_THROW(decode_plan(encode_plan(plan)), Error);
}

}  // namespace
}  // namespace tpllama
