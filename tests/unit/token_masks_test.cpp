// Grammar masks as the head applies them: ops::mask_logits against the definition (a token keeps
// its logit exactly when its bit is set, a TP slice reading the bits of its own token ids), and
// their trip through a step plan.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "ops/sampling.h"
#include "runtime/step_plan.h"

namespace tpllama {
namespace {

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
  StepPlan plan;
  plan.batch.tokens = {1, 2};
  plan.batch.positions = {0, 1};
  plan.batch.slots = {0, 0};
  plan.batch.logit_rows = {1};
  plan.sampling.resize(1);
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
