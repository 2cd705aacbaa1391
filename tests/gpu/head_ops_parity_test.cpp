// The vocabulary head's GPU ops against the CPU's: the log-softmax sums of scored rows, logit
// edits (penalties, biases), grammar masks, the argmax and the sampler, on 32k- and 128k-wide rows.
// Part of the GpuOps suite (gpu_ops_fixture.h). Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_ops_fixture.h"

namespace tpllama {
namespace {

// The log-softmax sums of scored rows, on the device: rows picked out of order and repeated, a
// chosen column outside this shard (-1) and one at the last column; a 128256-wide vocabulary.
TEST_P(GpuOps, LogitSumsOfScoredRows) {
  if (act() != DType::kF32)
    GTEST_SKIP() << "logits are f32 whatever the activations: runs with the f32 instance";
  const int64_t r = 9, cols = 128256;
  std::vector<float> logits(static_cast<size_t>(r * cols));
  std::normal_distribution<float> g(0.0f, 4.0f);
  for (float& v : logits) v = g(rng_);
  const std::vector<int32_t> rows = {7, 0, 3, 3, 8};
  const std::vector<int32_t> chosen = {5, -1, static_cast<int32_t>(cols - 1), 0, 1000};
  std::vector<float> max(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    max[i] =
        *std::max_element(logits.begin() + rows[i] * cols, logits.begin() + (rows[i] + 1) * cols);
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> sums(static_cast<size_t>(2 * n), -1.0f);
  std::vector<int32_t> hrows = rows, hchosen = chosen;
  ops::logit_sums(cpu_, host(sums, {2 * n}), host(logits, {r, cols}),
                  Tensor(hrows.data(), DType::kI32, {n}), host(max, {n}),
                  Tensor(hchosen.data(), DType::kI32, {n}));
  Device glogits = upload(logits, {r, cols}, DType::kF32), gmax = upload(max, {n}, DType::kF32);
  Device grows = upload_i32(rows), gchosen = upload_i32(chosen),
         gsums = upload(std::vector<float>(sums.size(), -1.0f), {2 * n}, DType::kF32);
  ops::logit_sums(gpu_, gsums.tensor, glogits.tensor, grows.tensor, gmax.tensor, gchosen.tensor);
  const std::vector<float> got = download(gsums);
  expect_close(sums, got, "logit_sums", 1e-6);
  EXPECT_EQ(got[static_cast<size_t>(n + 1)], 0.0f);  // the column this shard does not hold
}

// Logit edits (penalties, biases, bans): the GPU's one thread per cell against the CPU loop, cell
// for cell, with a scale on positive and negative logits, a ban and cells spread over the rows.
TEST_P(GpuOps, EditLogitsMatchesTheCpu) {
  if (act() == DType::kBF16) GTEST_SKIP() << "logits are f32 whatever the activations";
  const int64_t rows = 6, cols = 32000, n = 20000;
  std::vector<float> logits = random(static_cast<size_t>(rows * cols), 8.0f);
  std::vector<int32_t> cells;
  std::vector<float> params;
  for (int64_t i = 0; i < n; ++i) {  // distinct cells: row i % rows, column (i * 7) % cols
    cells.insert(cells.end(),
                 {static_cast<int32_t>(i % rows), static_cast<int32_t>((i * 7) % cols)});
    params.insert(params.end(), {i % 97 == 0 ? -INFINITY : 0.01f * static_cast<float>(i % 13),
                                 i % 3 == 0 ? 1.0f : 1.3f, 0.05f * static_cast<float>(i % 5)});
  }
  std::vector<float> expected = logits;
  ops::edit_logits(cpu_, host(expected, {rows, cols}), Tensor(cells.data(), DType::kI32, {n, 2}),
                   host(params, {n, 3}));
  Device gl = upload(logits, {rows, cols}, DType::kF32), gp = upload(params, {n, 3}, DType::kF32);
  Device gc = upload_i32(cells);
  ops::edit_logits(gpu_, gl.tensor, gc.tensor.reshape({n, 2}), gp.tensor);
  const std::vector<float> got = download(gl);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(got[i] == expected[i]) << "logit " << i << ": " << got[i] << " vs " << expected[i];
}

// Grammar masks: the GPU's blocks over a row's columns against the CPU loop, on a 128k slice with
// sparse and dense masks and a slice starting mid-vocabulary.
TEST_P(GpuOps, MaskLogitsMatchesTheCpu) {
  if (act() == DType::kBF16) GTEST_SKIP() << "logits are f32 whatever the activations";
  const int64_t rows = 5, cols = 64128, width = (128256 + 31) / 32, first = 64128;
  std::vector<float> logits = random(static_cast<size_t>(rows * cols), 8.0f);
  std::vector<int32_t> masked = {4, 1, 2};
  std::vector<int32_t> words(static_cast<size_t>(3 * width), 0);
  for (int64_t w = 0; w < width; ++w) {
    words[static_cast<size_t>(w)] =
        static_cast<int32_t>(0x01010101u * static_cast<uint32_t>(w % 7));
    words[static_cast<size_t>(width + w)] = -1;                       // everything
    words[static_cast<size_t>(2 * width + w)] = w % 97 == 0 ? 4 : 0;  // a few tokens
  }
  std::vector<float> expected = logits;
  ops::mask_logits(cpu_, host(expected, {rows, cols}), Tensor(masked.data(), DType::kI32, {3}),
                   Tensor(words.data(), DType::kI32, {3, width}), first);
  Device gl = upload(logits, {rows, cols}, DType::kF32);
  Device gr = upload_i32(masked), gw = upload_i32(words);
  ops::mask_logits(gpu_, gl.tensor, gr.tensor, gw.tensor.reshape({3, width}), first);
  const std::vector<float> got = download(gl);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(got[i] == expected[i]) << "logit " << i << ": " << got[i] << " vs " << expected[i];
}

TEST_P(GpuOps, ArgmaxTiesToTheLowestColumn) {
  const int64_t rows = 5, cols = 32000;
  std::vector<float> logits = random(static_cast<size_t>(rows * cols), 10.0f);
  logits[3] = logits[17] = 50.0f;                        // row 0: tie, 3 wins
  logits[static_cast<size_t>(cols + cols - 1)] = 60.0f;  // row 1: the last column
  Device gl = upload(logits, {rows, cols}, DType::kF32);
  std::vector<float> zeros(rows);
  Device gi = upload_i32(std::vector<int32_t>(rows, -1)), gval = upload(zeros, {rows}, DType::kF32);
  ops::argmax_rows(gpu_, gi.tensor, gval.tensor, gl.tensor);
  std::vector<int32_t> index(rows);
  std::vector<float> value(rows);
  ops::argmax_rows(cpu_, Tensor(index.data(), DType::kI32, {rows}),
                   Tensor(value.data(), DType::kF32, {rows}), host(logits, {rows, cols}));
  const std::vector<float> got = download(gi);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t candidate = 0;
    std::memcpy(&candidate, &got[static_cast<size_t>(r)], 4);
    EXPECT_EQ(candidate, index[static_cast<size_t>(r)]) << "row " << r;
  }
  EXPECT_EQ(index[0], 3);
  EXPECT_EQ(index[1], cols - 1);
  expect_close(value, download(gval), "argmax values");
}

// Sampling: the GPU's sort-and-draw against the CPU sampler, row by row, on the same logits and
// uniforms: every truncation alone and together, top-k at and past the vocabulary, ties (which
// go to the lower id), and columns past n holding values that must be ignored.
TEST_P(GpuOps, SampleRowsDrawTheCpuSamplersTokens) {
  if (act() == DType::kBF16) GTEST_SKIP() << "logits are f32 whatever the activations";
  std::vector<SamplingParams> settings(7);
  settings[0].temperature = 1.0;
  settings[1].temperature = 0.7, settings[1].top_k = 40;
  settings[2].temperature = 1.3, settings[2].top_p = 0.9;
  settings[3].temperature = 1.0, settings[3].min_p = 0.05;
  settings[4].temperature = 0.8, settings[4].top_k = 50, settings[4].top_p = 0.95,
  settings[4].min_p = 0.02;
  settings[5].temperature = 0.5, settings[5].top_k = 1 << 20;
  settings[6].temperature = 2.0, settings[6].top_k = 3, settings[6].top_p = 0.5;
  for (auto [cols, n] : {std::pair<int64_t, int>{1000, 1000}, {32000, 31990}, {4099, 7}}) {
    const int64_t rows = 70;  // more than one 64-row chunk is the pipeline's business, not the op's
    std::vector<float> logits = random(static_cast<size_t>(rows * cols), 6.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits.data() + r * cols;
      if (r % 5 == 0) row[n - 1] = row[0] = 9.0f;  // a tie at the top: the lower id comes first
      for (int64_t c = n; c < cols; ++c) row[c] = 50.0f;  // past n: never drawn
    }
    std::vector<ops::SampleRow> draws(static_cast<size_t>(rows));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (size_t r = 0; r < draws.size(); ++r) draws[r] = {settings[r % settings.size()], u(rng_)};
    Device gl = upload(logits, {rows, cols}, DType::kF32);
    runtime_->synchronize();
    ASSERT_TRUE(cuda::is_device_pointer(gl.tensor.data()));
    const std::vector<int32_t> candidate = ops::sample_rows(gpu_, gl.tensor, n, draws);
    const std::vector<int32_t> reference =
        ops::sample_rows(cpu_, host(logits, {rows, cols}), n, draws);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(candidate[static_cast<size_t>(r)], reference[static_cast<size_t>(r)])
          << "row " << r << " of " << cols << " columns (n " << n << "), setting " << r % 7
          << ", u " << draws[static_cast<size_t>(r)].uniform;
  }
}

}  // namespace
}  // namespace tpllama
