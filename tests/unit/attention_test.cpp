// CPU attention against a double-precision softmax(q·k/√d)·v over the same paged cache: shuffled
// block tables, decode tokens each of their own sequence and prefill chunks of one sequence (runs
// of 32 tokens or more together, in register tiles),
// contexts on and off block and vector boundaries, grouped-query heads, head sizes
// the AVX-512 kernel takes and one it leaves to the portable loop, one and two threads (with work
// enough to split a single token's heads), and guard regions around the output.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/gemm.h"

namespace tpllama {
namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim, block_size;
  std::vector<int> n_ctx;  // one token per entry, each over its own sequence
  int chunk = 0;   // > 0 instead: consecutive tokens in groups of `chunk` are prefill chunks of one
                   // sequence each
  int window = 0;  // > 0: a sliding window, each token seeing its last `window` positions
};

// count consecutive contexts from first (the tokens of a prefill chunk), each list appended.
std::vector<int> contexts(std::initializer_list<std::pair<int, int>> runs) {
  std::vector<int> n_ctx;
  for (const auto& [first, count] : runs)
    for (int i = 0; i < count; ++i) n_ctx.push_back(first + i);
  return n_ctx;
}

// The sequence (and table) of token m.
size_t sequence_of(const Case& c, size_t m) {
  return c.chunk > 0 ? m / static_cast<size_t>(c.chunk) : m;
}

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "h" << c.n_heads << "kv" << c.n_kv_heads << "d" << c.head_dim << "bs" << c.block_size
    << "ctx";
  if (c.chunk > 0)
    s << "_chunks_of_" << c.chunk << "_" << c.n_ctx.front() << "_to_" << c.n_ctx.back();
  else
    for (int n : c.n_ctx) s << "_" << n;
  if (c.window > 0) s << "_window_" << c.window;
  return s.str();
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << describe(c);
}

// A pool of blocks shared by all sequences, each sequence's blocks scattered over it in shuffled
// order.
struct PagedCache {
  std::vector<float> keys, values;
  std::vector<std::vector<int32_t>> tables;
};

PagedCache make_cache(const Case& c, std::mt19937& rng) {
  PagedCache cache;
  // Each sequence holds the longest context of its tokens (a chunk's tokens all read its table).
  std::vector<int> sequences;
  for (size_t m = 0; m < c.n_ctx.size(); ++m) {
    if (sequence_of(c, m) == sequences.size()) sequences.push_back(0);
    sequences.back() = std::max(sequences.back(), c.n_ctx[m]);
  }
  int n_blocks = 0;
  for (int n : sequences) n_blocks += (n + c.block_size - 1) / c.block_size;
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  for (int n : sequences) {
    const int blocks = (n + c.block_size - 1) / c.block_size;
    cache.tables.emplace_back(order.begin() + static_cast<int64_t>(next),
                              order.begin() + static_cast<int64_t>(next) + blocks);
    next += static_cast<size_t>(blocks);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const size_t pool = static_cast<size_t>(n_blocks) * c.block_size * c.n_kv_heads * c.head_dim;
  for (size_t i = 0; i < pool; ++i) {
    cache.keys.push_back(u(rng));
    cache.values.push_back(u(rng));
  }
  return cache;
}

// out[head] of one token, in double precision, straight from the definition.
std::vector<double> reference_head(const Case& c, const PagedCache& cache, size_t token,
                                   const float* q, int head) {
  const int hd = c.head_dim, n = c.n_ctx[token], kv_head = head / (c.n_heads / c.n_kv_heads);
  auto row = [&](const std::vector<float>& pool, int t) {
    const int64_t r =
        static_cast<int64_t>(
            cache.tables[sequence_of(c, token)][static_cast<size_t>(t / c.block_size)]) *
            c.block_size +
        t % c.block_size;
    return pool.data() + (r * c.n_kv_heads + kv_head) * hd;
  };
  const int first = c.window > 0 ? std::max(0, n - c.window) : 0;  // positions seen: [first, n)
  std::vector<double> scores(static_cast<size_t>(n), -INFINITY);
  for (int t = first; t < n; ++t) {
    double dot = 0;
    for (int i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * row(cache.keys, t)[i];
    scores[static_cast<size_t>(t)] = dot / std::sqrt(static_cast<double>(hd));
  }
  const double mx = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double& sc : scores) sum += (sc = std::exp(sc - mx));
  std::vector<double> o(static_cast<size_t>(hd), 0.0);
  for (int t = first; t < n; ++t)
    for (int i = 0; i < hd; ++i)
      o[static_cast<size_t>(i)] += scores[static_cast<size_t>(t)] / sum * row(cache.values, t)[i];
  return o;
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<Case, bool, int>> {};

TEST_P(AttentionTest, MatchesDoubleSoftmax) {
  const auto [c, portable, threads] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.n_heads * 131 + c.head_dim * 7 + c.n_ctx.size()));
  PagedCache cache = make_cache(c, rng);
  const int64_t tokens = static_cast<int64_t>(c.n_ctx.size()),
                width = static_cast<int64_t>(c.n_heads) * c.head_dim;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> q(static_cast<size_t>(tokens * width));
  for (float& v : q) v = u(rng);
  const ops::AttentionShape shape{
      c.n_heads,    c.n_kv_heads,
      c.head_dim,   static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))),
      c.block_size, c.window};
  // First the f32 cache; then a bf16 cache, against the reference of its values (the f32 cache
  // rounded to bf16).
  for (DType kv_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(kv_dtype));
    std::vector<uint16_t> keys16, values16;
    if (kv_dtype == DType::kBF16)
      for (auto [pool, pool16] :
           {std::pair{&cache.keys, &keys16}, std::pair{&cache.values, &values16}})
        for (float& v : *pool) {
          pool16->push_back(f32_to_bf16(v));
          v = bf16_to_f32(pool16->back());
        }
    const void* keys =
        kv_dtype == DType::kBF16 ? static_cast<const void*>(keys16.data()) : cache.keys.data();
    const void* values =
        kv_dtype == DType::kBF16 ? static_cast<const void*>(values16.data()) : cache.values.data();
    std::vector<ops::cpu::KvView> kv;
    // The tokens of a chunk name one table, as ops::attention's views of a step do.
    for (size_t m = 0; m < c.n_ctx.size(); ++m)
      kv.push_back({keys, values, cache.tables[sequence_of(c, m)].data(), c.n_ctx[m], kv_dtype});

    constexpr int64_t kGuard = 64;
    constexpr float kSentinel = 12345.0f;
    std::vector<float> out(static_cast<size_t>(tokens * width + 2 * kGuard), kSentinel);
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(threads);
    ops::cpu::force_portable_gemm(portable);
    ops::cpu::attention(Tensor(out.data() + kGuard, DType::kF32, {tokens, width}),
                        Tensor(q.data(), DType::kF32, {tokens, width}), kv, shape);
    ops::cpu::force_portable_gemm(false);
    omp_set_num_threads(saved_threads);

    for (int64_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)], kSentinel) << "write before the output at " << i;
      ASSERT_EQ(out[static_cast<size_t>(kGuard + tokens * width + i)], kSentinel)
          << "write past the output at " << i;
    }
    for (int64_t m = 0; m < tokens; ++m)
      for (int h = 0; h < c.n_heads; ++h) {
        const std::vector<double> expected = reference_head(
            c, cache, static_cast<size_t>(m), q.data() + m * width + h * c.head_dim, h);
        for (int i = 0; i < c.head_dim; ++i)
          ASSERT_NEAR(out[static_cast<size_t>(kGuard + m * width + h * c.head_dim + i)],
                      expected[static_cast<size_t>(i)], 2e-5)
              << "token " << m << " head " << h << " element " << i << " of " << describe(c);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Combine(
        ::testing::Values(
            Case{4, 4, 64, 16, {1, 16, 17, 33}},  // block and 16-lane tails
            Case{8, 2, 32, 4, {5, 50, 3}},        // grouped-query heads
            Case{2, 1, 128, 16, {31, 1}},         // wide heads, one kv head
            Case{3, 3, 48, 16, {20, 33}},         // an odd number of vectors a head
            Case{2, 2, 16, 8, {16, 9}},           // one vector a head
            Case{4, 2, 8, 3, {7, 10}},            // head_dim the AVX-512 kernel leaves
            Case{12, 12, 64, 16, {400}},          // one token: heads split over threads
            // decode steps: a token's kv heads an item, over tiles of 64 positions, the weighted
            // sums of 4, 3 and 2 heads side by side (and the heads left over, one at a time);
            // few tokens, whose kv heads are split between items
            Case{12, 12, 64, 16, {200, 130, 64, 65, 1, 129, 300, 17, 90}},
            Case{6, 3, 80, 16, {150, 70}}, Case{10, 5, 128, 16, {100, 200, 65}},
            Case{12, 4, 64, 16, {90, 128, 7, 64, 100, 33, 120, 77, 15, 128}},
            // a kv head's query heads in bundles of scores and sums: 4 + 2 (head_dim 48, an
            // odd number of vectors), 2 + 2 + 2 (head_dim 112)
            Case{12, 2, 48, 16, {90, 200, 33, 7}}, Case{6, 1, 112, 16, {130, 65}},
            // prefill chunks: items taken kv head by kv head, two tokens an item
            Case{4, 2, 64, 16, {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51}, 100},
            Case{6, 3, 32, 8, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, 100},
            Case{2, 1, 128, 16, {70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80}, 100},
            // pairs whose first token sees more than the second, and less
            Case{4, 4, 48, 16, {50, 20, 33, 64, 9, 9, 1, 17}, 100},
            // chunks of three sequences side by side (5, 5, 1 tokens): no pair
            // spans two; enough work to split over threads
            Case{8, 4, 64, 16, {200, 201, 202, 203, 204, 90, 91, 92, 93, 94, 30}, 5},
            // runs of 32 or more tokens attend together: a prompt's first
            // 100 tokens; a later chunk of 64 with 3 heads a kv head;
            // exactly 32 with wide heads; head_dim 48 (a half panel),
            // then a sequence whose context jumps (130 -> 200), so its
            // 31 and 9 tokens stay on the token kernels
            Case{4, 2, 64, 16, contexts({{1, 100}}), 100},
            Case{12, 4, 64, 16, contexts({{301, 64}}), 64},
            Case{2, 1, 128, 16, contexts({{1, 32}}), 32},
            Case{3, 3, 48, 8, contexts({{20, 40}, {100, 31}, {200, 9}}), 40},
            // runs split into blocks (each block sees fewer positions than
            // the run): 300 tokens in 2; 8 heads a kv head and head_dim
            // 80 in 4; head_dim 16 and blocks of 7 positions in 3; head_dim
            // 112 over a 1000-position context in 4
            Case{4, 4, 64, 16, contexts({{1, 300}}), 300},
            Case{8, 1, 80, 16, contexts({{5, 101}}), 101},
            Case{24, 2, 16, 7, contexts({{77, 45}}), 45},
            Case{6, 2, 112, 16, contexts({{1000, 250}}), 250},
            // two sequences' runs side by side with 7 tokens left over;
            // single tokens before and after a run
            Case{4, 2, 48, 16, contexts({{3, 33}, {50, 40}}), 33},
            Case{4, 2, 64, 16, contexts({{10, 1}, {3, 70}, {9, 1}}), 72},
            // sliding windows (Mistral): decode tokens inside and past the window; the
            // portable head size; a prefill chunk on the token kernels (no pairs under a
            // window); runs of 32+ tokens, from position 0 and later, blocked; a window
            // wider than every context
            Case{4, 2, 64, 16, {1, 16, 17, 33, 100, 300}, 0, 20},
            Case{4, 2, 8, 3, {7, 10, 30}, 0, 5},
            Case{4, 2, 64, 16, {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51}, 100, 16},
            Case{4, 2, 64, 16, contexts({{1, 100}}), 100, 24},
            Case{3, 3, 48, 8, contexts({{20, 40}, {100, 31}, {200, 9}}), 40, 33},
            Case{4, 4, 64, 16, contexts({{1, 300}}), 300, 7},
            Case{4, 2, 64, 16, contexts({{500, 64}}), 64, 100},  // packed from 384 on
            Case{8, 2, 64, 16, {300, 150, 70, 20}, 0, 100},      // decode past tiles
            // a run over more than one tile of 512 scores, the window starting inside the first
            Case{4, 2, 64, 16, contexts({{1200, 40}}), 40, 700},
            Case{2, 1, 128, 16, contexts({{1, 32}}), 32, 1000}),
        ::testing::Bool(), ::testing::Values(1, 2)),
    [](const auto& param_info) {
      return describe(std::get<0>(param_info.param)) +
             (std::get<1>(param_info.param) ? "_portable" : "_dispatch") + "_t" +
             std::to_string(std::get<2>(param_info.param));
    });

// A decode step's items take a token's kv heads whole or split, by how many threads there are: a
// head's bits must not change with that (nor, by the same arithmetic, with TP's heads a rank).
TEST(AttentionBits, DecodeDoesNotDependOnTheThreads) {
  const Case c{12, 4, 64, 16, {300, 150, 70, 5}};
  std::mt19937 rng(5);
  PagedCache cache = make_cache(c, rng);
  const int64_t tokens = static_cast<int64_t>(c.n_ctx.size()), width = int64_t{c.n_heads} * 64;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> q(static_cast<size_t>(tokens * width));
  for (float& v : q) v = u(rng);
  const ops::AttentionShape shape{c.n_heads, c.n_kv_heads, 64, 0.125f, c.block_size, 0};
  std::vector<ops::cpu::KvView> kv;
  for (size_t m = 0; m < c.n_ctx.size(); ++m)
    kv.push_back(
        {cache.keys.data(), cache.values.data(), cache.tables[m].data(), c.n_ctx[m], DType::kF32});
  const int saved_threads = omp_get_max_threads();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3, 4, 8}) {  // a token's 4 kv heads an item, 2, 2, 1, 1
    outs.emplace_back(static_cast<size_t>(tokens * width));
    omp_set_num_threads(threads);
    ops::cpu::attention(Tensor(outs.back().data(), DType::kF32, {tokens, width}),
                        Tensor(q.data(), DType::kF32, {tokens, width}), kv, shape);
  }
  omp_set_num_threads(saved_threads);
  for (size_t i = 1; i < outs.size(); ++i)
    EXPECT_EQ(std::memcmp(outs[i].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0)
        << "run " << i;
  const std::vector<double> expected = reference_head(c, cache, 0, q.data(), 0);
  EXPECT_NEAR(outs[0][0], expected[0], 2e-5);  // and they are the attention
}

}  // namespace
}  // namespace tpllama
