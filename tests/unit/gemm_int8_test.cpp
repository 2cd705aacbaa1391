// int8 weights in the CPU GEMM (ops/cpu/gemm.h) against a double-precision product of x and the
// weights as this test quantizes them itself from gemm.h's rule, within a closed-form bound: the
// rounding of x where the kernels quantize it (kInt8QuantizedRows rows and more), f32 summation
// otherwise. Odd sizes, all-zero groups and rows, every height from 1 to 40, mixed products in
// gemm_multi, one and two threads, the fast and portable kernels, guard regions (after out, after
// the packed weights, NaNs after x), and the packed bytes of hand-made rows read through the
// layout gemm.h documents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/cpu/gemm.h"

namespace tpllama {
namespace {

namespace cpu = ops::cpu;
constexpr int64_t kG = cpu::kInt8Group;
constexpr int64_t kGuard =
    64;  // floats of out, or bytes of the packed buffer, that must stay as set
constexpr float kSentinel = 12345.0f;
constexpr unsigned char kPackedSentinel = 0xA5;

int64_t groups_of(int64_t k) {
  return (k + kG - 1) / kG;
}

// gemm.h's rule, written here from its text: per row and group, scale = max|v| / 127 and
// q = v / scale rounded to nearest even, clamped to ±127; scale 0 and q 0 for an all-zero group.
struct Quantized {
  int64_t rows = 0, k = 0, groups = 0;
  std::vector<int> q;        // (rows, k)
  std::vector<float> scale;  // (rows, groups)
  double value(int64_t r, int64_t c) const {
    return static_cast<double>(q[r * k + c]) * scale[r * groups + c / kG];
  }
  float scale_at(int64_t r, int64_t c) const { return scale[r * groups + c / kG]; }
};

Quantized quantize(const float* v, int64_t rows, int64_t k) {
  Quantized out{rows, k, groups_of(k), std::vector<int>(static_cast<size_t>(rows * k)),
                std::vector<float>(static_cast<size_t>(rows * groups_of(k)))};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < out.groups; ++g) {
      const int64_t begin = g * kG, end = std::min(k, begin + kG);
      float amax = 0;
      for (int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(v[r * k + c]));
      const float scale = amax / 127.0f;
      out.scale[r * out.groups + g] = scale;
      for (int64_t c = begin; c < end; ++c)
        out.q[r * k + c] = scale == 0 ? 0
                                      : static_cast<int>(std::clamp(
                                            std::nearbyint(v[r * k + c] / scale), -127.0f, 127.0f));
    }
  return out;
}

// Random x (m, k) and w (n, k) in [-1, 1), with an all-zero weight row, an all-zero weight group
// and an all-zero row and group of x where the sizes have them.
struct Inputs {
  std::vector<float> x, w;
};
Inputs make_inputs(int64_t m, int64_t n, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in{std::vector<float>(static_cast<size_t>(m * k)),
            std::vector<float>(static_cast<size_t>(n * k))};
  for (float& v : in.x) v = u(rng);
  for (float& v : in.w) v = u(rng);
  auto zero = [](std::vector<float>& v, int64_t row, int64_t k_all, int64_t begin, int64_t end) {
    std::fill(v.begin() + row * k_all + std::min(begin, k_all),
              v.begin() + row * k_all + std::min(end, k_all), 0.0f);
  };
  if (n > 3) zero(in.w, 3, k, 0, k);
  if (n > 5) zero(in.w, 5, k, kG, 2 * kG);  // group 1 (nothing when k has one group)
  if (m > 1) zero(in.x, 1, k, 0, k);
  if (m > 2) zero(in.x, 2, k, 0, std::min(k - 1, kG));  // group 0 but for the row's last k
  return in;
}

// What out (r, j) should be and how far from it the kernels may land.
struct Expected {
  double value;  // x · ŵ in double, ŵ the dequantized weights
  double bound;
  double
      quantized_value;  // x̂ · ŵ in double, x̂ = x as gemm.h quantizes it (kInt8QuantizedRows+ rows)
  double slack;         // f32 summation alone
};
Expected expect(const float* x, const Quantized& w, int64_t j, int64_t k, bool quantized_x) {
  const Quantized xq = quantize(x, 1, k);
  Expected e{0, 0, 0, 0};
  double magnitude = 0, rounding = 0;
  for (int64_t c = 0; c < k; ++c) {
    const double wv = w.value(j, c);
    e.value += x[c] * wv;
    e.quantized_value += xq.value(0, c) * wv;
    magnitude += std::fabs(x[c] * wv) + std::fabs(xq.value(0, c) * wv);
    // |x - x̂| ≤ s_x / 2 for each k: s_w · q_w · s_x / 2, summed as gemm.h's bound per group says.
    rounding += static_cast<double>(w.scale_at(j, c)) * (xq.scale_at(0, c) / 2.0) *
                std::abs(w.q[j * k + c]);
  }
  // A sum of k products in f32 is off by at most about k · 2^-24 of the magnitudes summed; twice
  // that, with room for the per-group scaling and the partial sums the kernels add at the end.
  e.slack = 2.0 * static_cast<double>(k + 2 * groups_of(k) + 8) * std::ldexp(1.0, -24) * magnitude +
            1e-30;
  e.bound = (quantized_x ? rounding * (1 + 1e-6) : 0.0) + e.slack;
  return e;
}

// Weights packed into a buffer with a guard region after it, which guard_intact() checks.
struct Packed {
  Buffer buffer;
  size_t bytes;
  Packed(const std::vector<float>& w, int64_t n, int64_t k, DType dtype)
      : buffer(cpu::packed_bytes(n, k, dtype) + kGuard), bytes(cpu::packed_bytes(n, k, dtype)) {
    std::memset(buffer.data(), kPackedSentinel, bytes + kGuard);
    cpu::pack_weight(w.data(), n, k, dtype, buffer.data());
  }
  const void* data() const { return buffer.data(); }
  // Whether nothing was written past the packed bytes.
  bool guard_intact() const {
    const auto* p = static_cast<const unsigned char*>(buffer.data()) + bytes;
    return std::all_of(p, p + kGuard, [](unsigned char b) { return b == kPackedSentinel; });
  }
};

// x followed by NaNs: a kernel that reads past the end of x (the last quad of a k that is not a
// multiple of 4) turns an output into NaN even where the weights it meets there are zero.
std::vector<float> nan_after(const std::vector<float>& x) {
  std::vector<float> guarded(x);
  guarded.resize(x.size() + kGuard, std::numeric_limits<float>::quiet_NaN());
  return guarded;
}

// An output (m, n) between guard regions.
struct GuardedOut {
  std::vector<float> data;
  int64_t size;
  explicit GuardedOut(int64_t m, int64_t n)
      : data(static_cast<size_t>(m * n + 2 * kGuard), kSentinel), size(m * n) {}
  float* out() { return data.data() + kGuard; }
  float at(int64_t i) const { return data[static_cast<size_t>(kGuard + i)]; }
  // The first guard element written, or -1.
  int64_t first_guard_written() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (data[static_cast<size_t>(i)] != kSentinel ||
          data[static_cast<size_t>(kGuard + size + i)] != kSentinel)
        return i;
    return -1;
  }
};

struct Case {
  int64_t m, n, k;
};

// Which kernels a product runs: as dispatched on this CPU, the portable ones, or those of an
// AVX-512 CPU without VNNI (the portable ones where AVX-512 is missing).
enum class Kernels { kDispatch, kPortable, kNoVnni };
const char* kernels_name(Kernels k) {
  return k == Kernels::kDispatch ? "dispatch" : k == Kernels::kPortable ? "portable" : "no_vnni";
}
// Runs f with the kernels chosen, then restores dispatch; returns whether x was quantized (m rows).
template <class F>
bool with_kernels(Kernels k, int64_t m, F f) {
  cpu::force_portable_gemm(k == Kernels::kPortable);
  cpu::force_no_vnni(k == Kernels::kNoVnni);
  const std::string kernel = cpu::int8_kernel_name(m);
  f();
  cpu::force_portable_gemm(false);
  cpu::force_no_vnni(false);
  return kernel == "avx512-vnni" || kernel == "portable-quantized";
}

// out of gemm against expect(); ties the failure message to the case.
void check_product(const GuardedOut& out, const Inputs& in, const Quantized& w, const Case& c,
                   bool quantized_x, const std::string& what) {
  ASSERT_EQ(out.first_guard_written(), -1) << what << ": write outside the output";
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t j = 0; j < c.n; ++j) {
      const Expected e = expect(in.x.data() + r * c.k, w, j, c.k, quantized_x);
      const float got = out.at(r * c.n + j);
      ASSERT_NEAR(got, e.value, e.bound) << what << ": row " << r << " col " << j;
      // Where x is quantized the kernels compute x̂ · ŵ up to f32 summation: a tighter check of what
      // ran.
      if (quantized_x) {
        ASSERT_NEAR(got, e.quantized_value, e.slack)
            << what << ": row " << r << " col " << j << " (x̂)";
      }
    }
}

class GemmInt8Test : public ::testing::TestWithParam<std::tuple<Case, Kernels, int>> {};

TEST_P(GemmInt8Test, MatchesDoubleProductOfDequantizedWeights) {
  const auto [c, kernels, threads] = GetParam();
  const Inputs in = make_inputs(c.m, c.n, c.k, static_cast<unsigned>(c.m * 7919 + c.n * 31 + c.k));
  const Packed packed(in.w, c.n, c.k, DType::kI8);
  ASSERT_TRUE(packed.guard_intact()) << "pack_weight wrote past packed_bytes";
  GuardedOut out(c.m, c.n);
  const std::vector<float> x = nan_after(in.x);
  const bool quantized_x = with_kernels(kernels, c.m, [&, c = c, threads = threads] {
    cpu::gemm(out.out(), x.data(), c.m, packed.data(), DType::kI8, c.n, c.k, threads);
  });
  ASSERT_TRUE(packed.guard_intact());
  std::ostringstream what;
  what << c.m << "x" << c.n << "x" << c.k << " " << kernels_name(kernels) << " t" << threads;
  check_product(out, in, quantize(in.w.data(), c.n, c.k), c, quantized_x, what.str());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmInt8Test,
    ::testing::Combine(::testing::Values(Case{1, 1, 1}, Case{1, 33, 3}, Case{1, 100, 130},
                                         Case{1, 65, 515}, Case{1, 96, 768}, Case{2, 31, 5},
                                         Case{2, 64, 200}, Case{3, 97, 1030}, Case{4, 33, 257},
                                         Case{7, 40, 2051}, Case{12, 65, 384}, Case{13, 64, 130},
                                         Case{25, 100, 513}, Case{40, 57, 1031},
                                         Case{300, 70, 262},  // two row blocks
                                         Case{247, 33, 777}),
                       ::testing::Values(Kernels::kDispatch, Kernels::kPortable, Kernels::kNoVnni),
                       ::testing::Values(1, 2)),
    [](const auto& param_info) {
      const Case c = std::get<0>(param_info.param);
      std::ostringstream name;
      name << "m" << c.m << "n" << c.n << "k" << c.k << "_"
           << kernels_name(std::get<1>(param_info.param)) << "_t" << std::get<2>(param_info.param);
      return name.str();
    });

TEST(GemmInt8, EveryHeightFrom1To40OnEveryKernel) {
  constexpr int64_t n = 65,
                    k = 301;  // three groups, the last 45 long: neither a multiple of 4 nor of 64
  const std::vector<float> w = make_inputs(1, n, k, 1).w;
  const Quantized w0 = quantize(w.data(), n, k);
  const Packed packed(w, n, k, DType::kI8);
  for (int64_t m = 1; m <= 40; ++m) {
    const Inputs in{make_inputs(m, 1, k, static_cast<unsigned>(m)).x, w};
    const std::vector<float> x = nan_after(in.x);
    for (Kernels kernels : {Kernels::kDispatch, Kernels::kPortable, Kernels::kNoVnni}) {
      GuardedOut out(m, n);
      const bool quantized_x = with_kernels(kernels, m, [&] {
        cpu::gemm(out.out(), x.data(), m, packed.data(), DType::kI8, n, k, 2);
      });
      check_product(out, in, w0, {m, n, k}, quantized_x,
                    "m " + std::to_string(m) + " " + kernels_name(kernels));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(GemmInt8, PortableQuantizedPathEqualsVnniBitForBit) {
  // Integer sums are exact and the f32 steps are the same operations in the same order.
  const Case c{17, 100, 515};
  const Inputs in = make_inputs(c.m, c.n, c.k, 5);
  const Packed packed(in.w, c.n, c.k, DType::kI8);
  std::vector<float> reference(static_cast<size_t>(c.m * c.n)), candidate(reference.size());
  cpu::force_portable_gemm(true);
  cpu::gemm(reference.data(), in.x.data(), c.m, packed.data(), DType::kI8, c.n, c.k, 1);
  cpu::force_portable_gemm(false);
  cpu::gemm(candidate.data(), in.x.data(), c.m, packed.data(), DType::kI8, c.n, c.k, 2);
  EXPECT_EQ(std::string(cpu::int8_kernel_name(c.m)), cpu::cpu_has_avx512_vnni() ? "avx512-vnni"
                                                     : cpu::cpu_has_avx512()
                                                         ? "avx512-widen"
                                                         : "portable-quantized");
  if (!cpu::cpu_has_avx512_vnni() && cpu::cpu_has_avx512())
    return;  // no VNNI kernel to compare (widening is checked above)
  for (size_t i = 0; i < reference.size(); ++i)
    ASSERT_EQ(candidate[i], reference[i]) << "element " << i;
}

TEST(GemmInt8, KernelsAreNamedForThePathsTheyRun) {
  const int64_t few = cpu::kInt8QuantizedRows - 1, many = cpu::kInt8QuantizedRows;
  EXPECT_STREQ(cpu::int8_kernel_name(few),
               cpu::cpu_has_avx512() ? "avx512-widen" : "portable-widen");
  EXPECT_STREQ(cpu::int8_kernel_name(many), cpu::cpu_has_avx512_vnni() ? "avx512-vnni"
                                            : cpu::cpu_has_avx512()    ? "avx512-widen"
                                                                       : "portable-quantized");
  cpu::force_portable_gemm(true);
  EXPECT_STREQ(cpu::int8_kernel_name(few), "portable-widen");
  EXPECT_STREQ(cpu::int8_kernel_name(many), "portable-quantized");
  cpu::force_portable_gemm(false);
  cpu::force_no_vnni(true);  // AVX-512 without VNNI widens at every height
  EXPECT_STREQ(cpu::int8_kernel_name(many),
               cpu::cpu_has_avx512() ? "avx512-widen" : "portable-quantized");
  cpu::force_no_vnni(false);
}

// The layout of gemm.h, read here from its text: panel p at p · panel_bytes; in it, group g's
// values (4 k × 32 rows a 128 bytes, row j's 4 bytes at 4j) then its 32 f32 scales; after all
// groups, 32 int32 biases (-128 · Σ q) a group.
struct Layout {
  int64_t k;
  int64_t quads(int64_t len) const { return (len + 3) / 4; }
  int64_t panel_bytes() const { return 32 * quads(k) * 4 + 256 * groups_of(k); }
  int64_t group_start(int64_t g) const { return g * (32 * kG + 128); }
  int64_t group_len(int64_t g) const { return std::min(kG, k - g * kG); }
  int64_t value(int64_t row, int64_t col) const {
    const int64_t g = col / kG, i = col % kG;
    return row / 32 * panel_bytes() + group_start(g) + i / 4 * 128 + row % 32 * 4 + i % 4;
  }
  int64_t scale(int64_t row, int64_t g) const {
    return row / 32 * panel_bytes() + group_start(g) + quads(group_len(g)) * 128 + row % 32 * 4;
  }
  int64_t bias(int64_t row, int64_t g) const {
    return row / 32 * panel_bytes() + 32 * quads(k) * 4 + 128 * groups_of(k) + g * 128 +
           row % 32 * 4;
  }
};

TEST(GemmInt8Pack, HandMadeRowsHaveTheClosedFormValuesScalesAndBiases) {
  // Rows 0 and 33 (the second panel) of 40; k = 2 groups and 5: the last group short, k odd.
  constexpr int64_t n = 40, k = 2 * kG + 5;
  std::vector<float> w(static_cast<size_t>(n * k), 0.0f);
  std::vector<int> q(static_cast<size_t>(k));
  std::vector<float> scale = {0.25f, 0.0f, 0.0625f};
  // Group 0: ±(i % 255 - 127) / 4, largest |w| 127 / 4 (at i = 0), so scale 1/4 and q = ±(i % 255 -
  // 127). Group 1: zeros. Group 2: scale 1/16 with ties (0.5 → 0, 1.5 → 2, 2.5 → 2, -2.5 → -2: to
  // even) and the largest value 127/16.
  for (int64_t i = 0; i < kG; ++i) q[i] = (i % 2 == 0 ? 1 : -1) * (static_cast<int>(i % 255) - 127);
  const float tail[5] = {0.5f, 1.5f, 2.5f, -2.5f, 127.0f};
  const int tail_q[5] = {0, 2, 2, -2, 127};
  for (int64_t row : {0, 33}) {
    for (int64_t i = 0; i < kG; ++i) w[row * k + i] = static_cast<float>(q[i]) / 4.0f;
    for (int64_t i = 0; i < 5; ++i) w[row * k + 2 * kG + i] = tail[i] / 16.0f;
  }
  for (int64_t i = 0; i < 5; ++i) q[2 * kG + i] = tail_q[i];
  const Packed packed(w, n, k, DType::kI8);
  ASSERT_TRUE(packed.guard_intact());
  ASSERT_EQ(cpu::packed_bytes(n, k, DType::kI8), static_cast<size_t>(2 * Layout{k}.panel_bytes()));
  const auto* bytes = static_cast<const unsigned char*>(packed.data());
  const Layout at{k};
  for (int64_t row : {0, 33}) {
    for (int64_t c = 0; c < k; ++c) {
      ASSERT_EQ(static_cast<int>(static_cast<int8_t>(bytes[at.value(row, c)])), q[c])
          << "row " << row << " col " << c;
      ASSERT_EQ(cpu::packed_at(packed.data(), k, DType::kI8, row, c),
                static_cast<float>(q[c]) * scale[c / kG]);
    }
    for (int64_t g = 0; g < 3; ++g) {
      float s;
      int32_t bias;
      std::memcpy(&s, bytes + at.scale(row, g), sizeof s);
      std::memcpy(&bias, bytes + at.bias(row, g), sizeof bias);
      int sum = 0;
      for (int64_t c = g * kG; c < std::min(k, (g + 1) * kG); ++c) sum += q[c];
      EXPECT_EQ(s, scale[g]) << "row " << row << " group " << g;
      EXPECT_EQ(bias, -128 * sum) << "row " << row << " group " << g;
    }
  }
  // The rows left zero, and the padding of the last panel (rows 40-63), hold zeros.
  for (int64_t row : {1, 32, 39, 40, 63})
    for (int64_t c = 0; c < k; c += 7)
      ASSERT_EQ(bytes[at.value(row, c)], 0) << "row " << row << " col " << c;
}

TEST(GemmInt8Pack, PackedAtIsTheDequantizedValue) {
  constexpr int64_t n = 70, k = 300;
  const Inputs in = make_inputs(1, n, k, 9);
  const Packed packed(in.w, n, k, DType::kI8);
  ASSERT_TRUE(packed.guard_intact());
  const Quantized w = quantize(in.w.data(), n, k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      ASSERT_EQ(cpu::packed_at(packed.data(), k, DType::kI8, r, c),
                static_cast<float>(w.value(r, c)))
          << "row " << r << " col " << c;
}

// f32, bf16 and int8 products of one x in one gemm_multi pass, each against its own double
// product, with guards, and each equal to gemm of it alone.
class GemmInt8MultiTest : public ::testing::TestWithParam<std::tuple<int64_t, int, bool>> {};

TEST_P(GemmInt8MultiTest, MixedProductsMatchTheirReferencesAndGemmAlone) {
  const auto [m, threads, portable] = GetParam();
  constexpr int64_t k = 520;
  const std::vector<std::pair<int64_t, DType>> shapes = {
      {96, DType::kI8}, {33, DType::kF32}, {70, DType::kBF16}, {101, DType::kI8}};
  const Inputs base = make_inputs(m, 1, k, static_cast<unsigned>(m * 13 + threads));
  std::vector<Inputs> ins;
  std::vector<Packed> packed;
  std::vector<GuardedOut> outs;
  std::vector<cpu::GemmProduct> products;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [n, dtype] = shapes[i];
    ins.push_back(make_inputs(1, n, k, static_cast<unsigned>(100 + i)));
    packed.emplace_back(ins.back().w, n, k, dtype);
    outs.emplace_back(m, n);
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    products.push_back({outs[i].out(), packed[i].data(), shapes[i].second, shapes[i].first});
  std::vector<std::vector<float>> alone;
  const bool quantized_x = with_kernels(
      portable ? Kernels::kPortable : Kernels::kDispatch, m, [&, m = m, threads = threads] {
        cpu::gemm_multi(base.x.data(), m, k, products.data(), static_cast<int>(products.size()),
                        threads);
        for (const auto& [n, dtype] : shapes) {
          alone.emplace_back(static_cast<size_t>(m * n));
          cpu::gemm(alone.back().data(), base.x.data(), m, packed[alone.size() - 1].data(), dtype,
                    n, k, threads);
        }
      });
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [n, dtype] = shapes[i];
    const std::string what = "product " + std::to_string(i) + " (" + dtype_name(dtype) + ")";
    ASSERT_TRUE(packed[i].guard_intact()) << what;
    if (dtype == DType::kI8) {
      const Inputs in{base.x, ins[i].w};
      check_product(outs[i], in, quantize(ins[i].w.data(), n, k), {m, n, k}, quantized_x, what);
    } else {
      ASSERT_EQ(outs[i].first_guard_written(), -1) << what;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < k; ++c) {
            const float wv = ins[i].w[static_cast<size_t>(j * k + c)];
            dot += static_cast<double>(base.x[static_cast<size_t>(r * k + c)]) *
                   (dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(wv)) : wv);
          }
          ASSERT_NEAR(outs[i].at(r * n + j), dot, 4e-6 * std::sqrt(static_cast<double>(k)) + 1e-6)
              << what;
        }
    }
    for (int64_t e = 0; e < m * n; ++e)
      ASSERT_EQ(outs[i].at(e), alone[i][static_cast<size_t>(e)]) << what << " vs gemm alone";
  }
}

INSTANTIATE_TEST_SUITE_P(Heights, GemmInt8MultiTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 5, 32, 300),
                                            ::testing::Values(1, 2), ::testing::Bool()),
                         [](const auto& param_info) {
                           std::ostringstream name;
                           name << "m" << std::get<0>(param_info.param) << "_t"
                                << std::get<1>(param_info.param)
                                << (std::get<2>(param_info.param) ? "_portable" : "_dispatch");
                           return name.str();
                         });

}  // namespace
}  // namespace tpllama
