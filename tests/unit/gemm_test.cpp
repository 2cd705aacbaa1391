// The packed-panel GEMM against a double-precision product of the same values: odd sizes, panel
// tails, k-block and row-block boundaries, f32 and bf16 weights, the AVX-512 and portable kernels,
// one and two threads (which take the row blocks and runs of panels from one queue), and guard
// regions around the output.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/gemm.h"
#include "ops/matmul.h"
#include "ops/weight.h"

namespace tpllama {
namespace {

struct Case {
  int64_t m, n, k;
};

// x[0, k) · w[0, k) in double, with w as held: bf16 weights are the f32 ones rounded to nearest
// even; the product is exact in double.
double reference_dot(const float* x, const float* w, int64_t k, DType dtype) {
  double dot = 0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float held = dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(w[kk])) : w[kk];
    dot += static_cast<double>(x[kk]) * held;
  }
  return dot;
}

class GemmTest : public ::testing::TestWithParam<std::tuple<Case, DType, bool, int>> {};

TEST_P(GemmTest, MatchesDoubleProduct) {
  const auto [c, dtype, portable, threads] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.m * 7919 + c.n * 31 + c.k));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.m * c.k)), w(static_cast<size_t>(c.n * c.k));
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);

  const DeviceContext ctx{Device::kCpu, threads};
  Buffer packed(ops::weight_bytes(ctx, c.n, c.k, dtype));
  const ops::Weight weight =
      ops::pack_weight(ctx, Tensor(w.data(), DType::kF32, {c.n, c.k}), dtype, packed.data());
  constexpr int64_t kGuard = 64;
  constexpr float kSentinel = 12345.0f;
  std::vector<float> out(static_cast<size_t>(c.m * c.n + 2 * kGuard), kSentinel);
  ops::cpu::force_portable_gemm(portable);
  ops::matmul(ctx, Tensor(out.data() + kGuard, DType::kF32, {c.m, c.n}),
              Tensor(x.data(), DType::kF32, {c.m, c.k}), weight);
  ops::cpu::force_portable_gemm(false);

  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(out[static_cast<size_t>(i)], kSentinel) << "write before the output at " << i;
    ASSERT_EQ(out[static_cast<size_t>(kGuard + c.m * c.n + i)], kSentinel)
        << "write past the output at " << i;
  }
  const double tol = 4e-6 * std::sqrt(static_cast<double>(c.k)) + 1e-6;  // fp32 summation order
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const double expected = reference_dot(x.data() + i * c.k, w.data() + j * c.k, c.k, dtype);
      ASSERT_NEAR(out[static_cast<size_t>(kGuard + i * c.n + j)], expected, tol)
          << "row " << i << " col " << j << " of " << c.m << "x" << c.n << "x" << c.k;
    }
  EXPECT_FLOAT_EQ(ops::weight_at(weight, c.n - 1, c.k - 1),
                  dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(w.back())) : w.back());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    ::testing::Combine(
        ::testing::Values(Case{1, 1, 1}, Case{1, 33, 17}, Case{13, 64, 300}, Case{25, 100, 513},
                          Case{247, 65, 257}, Case{1, 512, 768}, Case{12, 32, 256},
                          Case{3, 97, 1031}, Case{5, 57, 384}, Case{36, 96, 1024},
                          Case{128, 48, 2048}, Case{16, 40, 200},
                          Case{32, 64, 193},      // balanced tiles: 8+8, 11+11+10
                          Case{300, 200, 1500}),  // two row blocks, threads sharing 14 items
        ::testing::Values(DType::kF32, DType::kBF16), ::testing::Bool(), ::testing::Values(1, 2)),
    [](const auto& param_info) {
      const Case c = std::get<0>(param_info.param);
      std::ostringstream name;
      name << "m" << c.m << "n" << c.n << "k" << c.k << "_"
           << dtype_name(std::get<1>(param_info.param))
           << (std::get<2>(param_info.param) ? "_portable" : "_dispatch") << "_t"
           << std::get<3>(param_info.param);
      return name.str();
    });

TEST(Gemm, KernelIsNamed) {
  // This machine type has AVX-512; elsewhere the portable kernel is the right answer.
  const std::string name = ops::cpu::gemm_kernel_name();
  EXPECT_TRUE(name == "avx512" || name == "portable") << name;
  ops::cpu::force_portable_gemm(true);
  EXPECT_STREQ(ops::cpu::gemm_kernel_name(), "portable");
  ops::cpu::force_portable_gemm(false);
}

// Products of one x in one pass (ops::matmuls: Q, K, V; gate and up) against a double-precision
// product each, with guard regions around every output, odd widths, both dtypes, a mix of them,
// one and two threads, decode and prefill heights; each output also equals what matmul alone gives.
// Set 0: three narrow products (runs of one panel); set 1: four wide ones (runs of several panels,
// clipped at each product's end; decode heights split over two threads too).
struct ProductSet {
  int64_t k;
  std::vector<std::pair<int64_t, DType>> shapes;
};
const ProductSet kProductSets[] = {
    {520, {{96, DType::kF32}, {33, DType::kF32}, {70, DType::kBF16}}},
    {1040, {{700, DType::kF32}, {300, DType::kBF16}, {65, DType::kF32}, {31, DType::kBF16}}},
};

class GemmMultiTest : public ::testing::TestWithParam<std::tuple<int64_t, int, int>> {};

TEST_P(GemmMultiTest, EachProductMatchesDoubleProductAndMatmul) {
  const auto [m, threads, set] = GetParam();
  const int64_t k = kProductSets[set].k;
  const std::vector<std::pair<int64_t, DType>>& shapes = kProductSets[set].shapes;
  std::mt19937 rng(static_cast<unsigned>(m * 31 + threads + set * 7));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = u(rng);
  const DeviceContext ctx{Device::kCpu, threads};
  constexpr int64_t kGuard = 64;
  constexpr float kSentinel = 12345.0f;
  std::vector<std::vector<float>> w, out, alone;
  std::vector<Buffer> packed;
  std::vector<ops::Weight> weights;
  for (const auto& [n, dtype] : shapes) {
    w.emplace_back(static_cast<size_t>(n * k));
    for (float& v : w.back()) v = u(rng);
    packed.emplace_back(ops::weight_bytes(ctx, n, k, dtype));
    weights.push_back(ops::pack_weight(ctx, Tensor(w.back().data(), DType::kF32, {n, k}), dtype,
                                       packed.back().data()));
    out.emplace_back(static_cast<size_t>(m * n + 2 * kGuard), kSentinel);
    alone.emplace_back(static_cast<size_t>(m * n));
  }
  auto view = [&](size_t i) {
    return Tensor(out[i].data() + kGuard, DType::kF32, {m, shapes[i].first});
  };
  const Tensor xt(x.data(), DType::kF32, {m, k});
  if (shapes.size() == 3)
    ops::matmuls(ctx, xt, {{view(0), &weights[0]}, {view(1), &weights[1]}, {view(2), &weights[2]}});
  else
    ops::matmuls(ctx, xt,
                 {{view(0), &weights[0]},
                  {view(1), &weights[1]},
                  {view(2), &weights[2]},
                  {view(3), &weights[3]}});
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [n, dtype] = shapes[i];
    ops::matmul(ctx, Tensor(alone[i].data(), DType::kF32, {m, n}), xt, weights[i]);
    for (int64_t g = 0; g < kGuard; ++g) {
      ASSERT_EQ(out[i][static_cast<size_t>(g)], kSentinel)
          << "product " << i << ": write before its output";
      ASSERT_EQ(out[i][static_cast<size_t>(kGuard + m * n + g)], kSentinel)
          << "product " << i << ": write past it";
    }
    const double tol = 4e-6 * std::sqrt(static_cast<double>(k)) + 1e-6;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const double expected = reference_dot(x.data() + r * k, w[i].data() + j * k, k, dtype);
        const float got = out[i][static_cast<size_t>(kGuard + r * n + j)];
        ASSERT_NEAR(got, expected, tol) << "product " << i << " row " << r << " col " << j;
        ASSERT_EQ(got, alone[i][static_cast<size_t>(r * n + j)])
            << "product " << i << " differs from matmul alone";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Heights, GemmMultiTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 7, 32, 300),
                                            ::testing::Values(1, 2), ::testing::Values(0, 1)),
                         [](const auto& param_info) {
                           std::ostringstream name;
                           name << "m" << std::get<0>(param_info.param) << "_t"
                                << std::get<1>(param_info.param) << "_set"
                                << std::get<2>(param_info.param);
                           return name.str();
                         });

TEST(GemmMulti, RefusesMoreProductsThanItTakesAndTensorsOffTheDevice) {
  const DeviceContext ctx{Device::kCpu, 1};
  std::vector<float> w(4 * 8, 0.5f), x(8, 1.0f), out(4 * 5);
  Buffer packed(ops::weight_bytes(ctx, 4, 8, DType::kF32));
  const ops::Weight weight =
      ops::pack_weight(ctx, Tensor(w.data(), DType::kF32, {4, 8}), DType::kF32, packed.data());
  const Tensor xt(x.data(), DType::kF32, {1, 8});
  auto o = [&](int i) { return Tensor(out.data() + 4 * i, DType::kF32, {1, 4}); };
  EXPECT_THROW(
      ops::matmuls(
          ctx, xt,
          {{o(0), &weight}, {o(1), &weight}, {o(2), &weight}, {o(3), &weight}, {o(4), &weight}}),
      Error);
  const Tensor on_gpu(out.data(), DType::kF32, {1, 4},
                      Device::kCuda);  // claims device memory: never touched
  EXPECT_THROW(ops::matmuls(ctx, xt, {{o(0), &weight}, {on_gpu, &weight}}), Error);
  ops::matmuls(ctx, xt, {{o(0), &weight}, {o(1), &weight}});
  EXPECT_EQ(out[0], 4.0f);  // 8 × 0.5 × 1
  EXPECT_EQ(out[7], 4.0f);
}

}  // namespace
}  // namespace tpllama
