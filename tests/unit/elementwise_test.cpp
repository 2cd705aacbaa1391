// CPU RMSNorm and SiLU·mul against their closed forms in double precision: lengths on and off the
// 16-lane vector width, inputs far into both tails of the sigmoid, the AVX-512 kernels and the
// portable loops, one and two threads, and guard regions around the output; RoPE and the residual
// add against theirs, split over threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/gemm.h"

namespace tpllama {
namespace {

constexpr int64_t kGuard = 32;
constexpr float kSentinel = -777.0f;

// A buffer of n values with kGuard sentinels either side; data() is the first value.
struct Guarded {
  std::vector<float> all;
  explicit Guarded(int64_t n) : all(static_cast<size_t>(n + 2 * kGuard), kSentinel) {}
  float* data() { return all.data() + kGuard; }
  void expect_guards_intact(int64_t n) const {
    for (int64_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(all[static_cast<size_t>(i)], kSentinel) << "write before the output at " << i;
      ASSERT_EQ(all[static_cast<size_t>(kGuard + n + i)], kSentinel)
          << "write past the output at " << i;
    }
  }
};

using Param = std::tuple<int64_t, int64_t, bool, int>;  // rows, columns, portable, threads

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  std::ostringstream s;
  s << std::get<0>(info.param) << "x" << std::get<1>(info.param)
    << (std::get<2>(info.param) ? "_portable" : "_dispatch") << "_t" << std::get<3>(info.param);
  return s.str();
}

class ElementwiseTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(std::get<3>(GetParam()));
    ops::cpu::force_portable_gemm(std::get<2>(GetParam()));
  }
  void TearDown() override {
    ops::cpu::force_portable_gemm(false);
    omp_set_num_threads(saved_threads_);  // later suites keep the process's thread count
  }
  int saved_threads_ = 1;
};

TEST_P(ElementwiseTest, RmsNormMatchesClosedForm) {
  const auto [rows, d, portable, threads] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(rows * 131 + d));
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(rows * d)), w(static_cast<size_t>(d));
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  Guarded out(rows * d);
  const float eps = 1e-5f;
  ops::cpu::rms_norm(Tensor(out.data(), DType::kF32, {rows, d}),
                     Tensor(x.data(), DType::kF32, {rows, d}), Tensor(w.data(), DType::kF32, {d}),
                     eps);
  out.expect_guards_intact(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i)
      ss += static_cast<double>(x[static_cast<size_t>(r * d + i)]) *
            x[static_cast<size_t>(r * d + i)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      const double expected = x[static_cast<size_t>(r * d + i)] * inv * w[static_cast<size_t>(i)];
      ASSERT_NEAR(out.data()[r * d + i], expected, 1e-6 * (1.0 + std::abs(expected)))
          << "row " << r << " col " << i;
    }
  }
}

TEST_P(ElementwiseTest, SiluMulMatchesClosedForm) {
  const auto [rows, d, portable, threads] = GetParam();
  const int64_t n = rows * d;
  std::mt19937 rng(static_cast<unsigned>(n * 7 + 3));
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  Guarded gate(n);
  std::vector<float> up(static_cast<size_t>(n)), before(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Every 17th input far into a tail (±95: e^-g overflows a float), the rest across the curve.
    gate.data()[i] = i % 17 == 5 ? (i % 2 == 0 ? 95.0f : -95.0f) : u(rng);
    up[static_cast<size_t>(i)] = u(rng);
    before[static_cast<size_t>(i)] = gate.data()[i];
  }
  const Tensor gated(gate.data(), DType::kF32, {rows, d});
  ops::cpu::silu_mul(gated, gated, Tensor(up.data(), DType::kF32, {rows, d}));
  gate.expect_guards_intact(n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = before[static_cast<size_t>(i)];
    const double expected = g / (1.0 + std::exp(-g)) * up[static_cast<size_t>(i)];
    ASSERT_NEAR(gate.data()[i], expected, 2e-6 * (1.0 + std::abs(expected)))
        << "element " << i << ", gate " << g;
  }
}

// Rotate-half RoPE and the residual add, on inputs large enough to be split over two threads.
TEST(Elementwise, RopeAndAddMatchClosedFormOnOneAndTwoThreads) {
  const int64_t rows = 1200;
  const int n_heads = 4, head_dim = 16, half = head_dim / 2;
  const int64_t width = int64_t{n_heads} * head_dim;
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * width)), y(x.size()),
      cos(static_cast<size_t>(rows * half)), sin(cos.size());
  for (float& v : x) v = u(rng);
  for (float& v : y) v = u(rng);
  for (size_t i = 0; i < cos.size(); ++i) {
    const double angle = 0.37 * static_cast<double>(i);
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<float> roped = x, summed = x;
    ops::cpu::rope(Tensor(roped.data(), DType::kF32, {rows, width}),
                   Tensor(cos.data(), DType::kF32, {rows, half}),
                   Tensor(sin.data(), DType::kF32, {rows, half}), n_heads, head_dim);
    ops::cpu::add(Tensor(summed.data(), DType::kF32, {rows, width}),
                  Tensor(y.data(), DType::kF32, {rows, width}));
    for (int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < n_heads; ++h)
        for (int i = 0; i < half; ++i) {
          const size_t at = static_cast<size_t>(r * width + h * head_dim + i),
                       k = static_cast<size_t>(r * half + i);
          const double a = x[at], b = x[at + half];
          ASSERT_NEAR(roped[at], a * cos[k] - b * sin[k], 1e-6)
              << threads << " threads, row " << r << " head " << h;
          ASSERT_NEAR(roped[at + half], a * sin[k] + b * cos[k], 1e-6)
              << threads << " threads, row " << r << " head " << h;
        }
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(summed[i], x[i] + y[i]) << threads << " threads, element " << i;
  }
  omp_set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ElementwiseTest,
                         ::testing::Combine(::testing::Values(int64_t{1}, int64_t{3}, int64_t{40}),
                                            ::testing::Values(int64_t{1}, int64_t{16}, int64_t{37},
                                                              int64_t{768}, int64_t{2049}),
                                            ::testing::Bool(), ::testing::Values(1, 2)),
                         name_of);

}  // namespace
}  // namespace tpllama
