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

#include "core/tensor.h"
#include "ops/cpu/gemm.h"
#include "ops/ops.h"

namespace tpllama {
namespace {

struct Case {
  int64_t m, n, k;
};

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
  const ops::Weight weight = ops::pack_weight(ctx, Tensor(w.data(), DType::kF32, {c.n, c.k}), dtype, packed.data());
  constexpr int64_t kGuard = 64;
  constexpr float kSentinel = 12345.0f;
  std::vector<float> out(static_cast<size_t>(c.m * c.n + 2 * kGuard), kSentinel);
  ops::cpu::force_portable_gemm(portable);
  ops::matmul(ctx, Tensor(out.data() + kGuard, DType::kF32, {c.m, c.n}), Tensor(x.data(), DType::kF32, {c.m, c.k}),
              weight);
  ops::cpu::force_portable_gemm(false);

  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(out[static_cast<size_t>(i)], kSentinel) << "write before the output at " << i;
    ASSERT_EQ(out[static_cast<size_t>(kGuard + c.m * c.n + i)], kSentinel) << "write past the output at " << i;
  }
  const double tol = 4e-6 * std::sqrt(static_cast<double>(c.k)) + 1e-6;  // fp32 summation order
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double expected = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float wv = w[static_cast<size_t>(j * c.k + kk)];
        // bf16 weights are the f32 ones rounded to nearest even; the product is exact in double.
        const float held = dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(wv)) : wv;
        expected += static_cast<double>(x[static_cast<size_t>(i * c.k + kk)]) * held;
      }
      ASSERT_NEAR(out[static_cast<size_t>(kGuard + i * c.n + j)], expected, tol)
          << "row " << i << " col " << j << " of " << c.m << "x" << c.n << "x" << c.k;
    }
  EXPECT_FLOAT_EQ(ops::weight_at(weight, c.n - 1, c.k - 1),
                  dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(w.back())) : w.back());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    ::testing::Combine(::testing::Values(Case{1, 1, 1}, Case{1, 33, 17}, Case{13, 64, 300}, Case{25, 100, 513},
                                         Case{247, 65, 257}, Case{1, 512, 768}, Case{12, 32, 256}, Case{3, 97, 1031},
                                         Case{5, 57, 384}, Case{36, 96, 1024}, Case{128, 48, 2048},
                                         Case{16, 40, 200}, Case{32, 64, 193},  // balanced tiles: 8+8, 11+11+10
                                         Case{300, 200, 1500}),  // two row blocks, threads sharing 14 items
                       ::testing::Values(DType::kF32, DType::kBF16), ::testing::Bool(), ::testing::Values(1, 2)),
    [](const auto& param_info) {
      const Case c = std::get<0>(param_info.param);
      std::ostringstream name;
      name << "m" << c.m << "n" << c.n << "k" << c.k << "_" << dtype_name(std::get<1>(param_info.param))
           << (std::get<2>(param_info.param) ? "_portable" : "_dispatch") << "_t" << std::get<3>(param_info.param);
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

}  // namespace
}  // namespace tpllama
