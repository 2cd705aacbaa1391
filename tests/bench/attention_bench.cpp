// The CPU attention on its own: a decode step (one token a sequence) or a prefill chunk over a
// paged cache of seeded random keys and values, LAYERS layers' pools so that the cache comes from
// memory as in a model, blocks of each sequence scattered over the pool as the engine hands them
// out. Not a test: a benchmark that prints numbers (scripts/bench/attention.sh runs it). Prints per
// call the time; for decode the KV bytes it reads once (every position's key and value of every kv
// head) and that rate, and the same bytes read by a plain streaming loop over the pools, its
// bound; for a prefill chunk its FLOP rate.
//
// Usage: attention_bench SEQS CONTEXT [HEADS KV_HEADS HEAD_DIM] [f32|bf16] [THREADS] [LAYERS]
//                        [QUERY_TOKENS] [ordered|shuffled] [BLOCK]
// QUERY_TOKENS: tokens a sequence per call (1: decode; more: a prefill chunk ending at CONTEXT).
// ordered (default): each sequence's blocks side by side, as a prompt's after its prefill;
// shuffled: every block anywhere in the pool, as a long run's decode leaves them. BLOCK: positions
// a KV block (default 64, the engine's on a CPU).

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/random.h"
#include "core/tensor.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/memory.h"

namespace {

using tpllama::Buffer;
using tpllama::DType;
using tpllama::Tensor;
namespace cpu = tpllama::ops::cpu;

struct Pool {
  void* keys = nullptr;
  void* values = nullptr;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums every float of the pools' used rows, in parallel: the rate a plain stream reads them at.
float stream(const std::vector<Pool>& pools, size_t bytes_each) {
  float total = 0;
  for (const Pool& p : pools)
    for (const void* base : {p.keys, p.values}) {
      const float* f = static_cast<const float*>(base);
      const int64_t n = static_cast<int64_t>(bytes_each / sizeof(float));
      float s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
      for (int64_t i = 0; i < n; ++i) s += f[i];
      total += s;
    }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s SEQS CONTEXT [HEADS KV_HEADS HEAD_DIM] [f32|bf16] [THREADS] [LAYERS] "
                 "[QUERY_TOKENS] [ordered|shuffled] [BLOCK]\n",
                 argv[0]);
    return 2;
  }
  const int seqs = std::atoi(argv[1]), ctx = std::atoi(argv[2]);
  const int heads = argc > 5 ? std::atoi(argv[3]) : 12,
            kv_heads = argc > 5 ? std::atoi(argv[4]) : 12, hd = argc > 5 ? std::atoi(argv[5]) : 64;
  const DType dtype = argc > 6 && std::string(argv[6]) == "bf16" ? DType::kBF16 : DType::kF32;
  const int threads = argc > 7 ? std::atoi(argv[7]) : 2,
            layers = argc > 8 ? std::atoi(argv[8]) : 12, qt = argc > 9 ? std::atoi(argv[9]) : 1;
  const bool shuffled = argc > 10 && std::string(argv[10]) == "shuffled";
  const int block = argc > 11 ? std::atoi(argv[11]) : 64;
  omp_set_num_threads(threads);
  const int blocks_per_seq = (ctx + block - 1) / block, n_blocks = seqs * blocks_per_seq;
  const int64_t kv_dim = int64_t{kv_heads} * hd, elem = dtype == DType::kBF16 ? 2 : 4;
  const size_t pool_bytes = static_cast<size_t>(n_blocks) * block * kv_dim * elem;
  std::mt19937 rng(7);
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  if (shuffled) std::shuffle(order.begin(), order.end(), rng);
  std::vector<Pool> pools(static_cast<size_t>(layers));
  uint64_t state = 11;  // uniform in [-1, 1): fast enough for gigabytes of cache
  auto uniform = [&state] {
    return static_cast<float>(tpllama::splitmix64_next(state) >> 40) * 0x1p-23f - 1.0f;
  };
  for (Pool& p : pools)
    for (void** base : {&p.keys, &p.values}) {
      *base = cpu::map_pages(pool_bytes, true);
      const size_t n = pool_bytes / static_cast<size_t>(elem);
      for (size_t i = 0; i < n; ++i) {
        const float x = uniform();
        if (dtype == DType::kBF16)
          static_cast<uint16_t*>(*base)[i] = tpllama::f32_to_bf16(x);
        else
          static_cast<float*>(*base)[i] = x;
      }
    }
  const int tokens = seqs * qt;
  Buffer q(static_cast<size_t>(tokens) * heads * hd * sizeof(float)),
      out(static_cast<size_t>(tokens) * heads * hd * sizeof(float));
  for (int64_t i = 0; i < int64_t{tokens} * heads * hd; ++i)
    reinterpret_cast<float*>(q.data())[i] = uniform();
  const Tensor qt_tensor(q.data(), DType::kF32, {tokens, int64_t{heads} * hd});
  const Tensor out_tensor(out.data(), DType::kF32, {tokens, int64_t{heads} * hd});
  tpllama::ops::AttentionShape shape;
  shape.n_heads = heads;
  shape.n_kv_heads = kv_heads;
  shape.head_dim = hd;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  shape.block_size = block;
  auto views_of = [&](const Pool& p) {
    std::vector<cpu::KvView> v;
    for (int s = 0; s < seqs; ++s)
      for (int t = 0; t < qt; ++t)
        v.push_back({p.keys, p.values, order.data() + s * blocks_per_seq, ctx - qt + 1 + t, dtype});
    return v;
  };
  std::vector<std::vector<cpu::KvView>> views;
  for (const Pool& p : pools) views.push_back(views_of(p));
  auto step = [&] {
    for (const auto& v : views) cpu::attention(out_tensor, qt_tensor, v, shape);
  };
  step();  // warm-up
  const int repeats = std::max(3, static_cast<int>(2e9 / (2.0 * pool_bytes * layers)));
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    step();
    best = std::min(best, now() - t0);
  }
  volatile float sink = stream(pools, pool_bytes);
  double best_stream = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    sink = stream(pools, pool_bytes);
    best_stream = std::min(best_stream, now() - t0);
  }
  (void)sink;
  const double bytes = 2.0 * static_cast<double>(pool_bytes) * layers;
  std::printf(
      "seqs %d context %d query tokens %d heads %d/%d head_dim %d KV %s threads %d layers %d, "
      "blocks of %d %s: %.3f ms a layer, ",
      seqs, ctx, qt, heads, kv_heads, hd, dtype == DType::kBF16 ? "bf16" : "f32", threads, layers,
      block, shuffled ? "shuffled" : "ordered", 1e3 * best / layers);
  if (qt > 1) {  // a prefill chunk is bound by its arithmetic: 2 products of 2 FLOPs a position
    const double n = qt, seen = n * (ctx - n + 1) + n * (n - 1) / 2;  // positions, a sequence
    std::printf("%.0f GFLOP/s (%.1f GFLOP a layer)\n",
                4.0 * seen * seqs * heads * hd * layers / best / 1e9,
                4.0 * seen * seqs * heads * hd / 1e9);
  } else {
    std::printf(
        "%.1f GB/s of KV (%.2f MB a layer); a plain stream of the pools %.1f GB/s -> %.0f%% of "
        "it\n",
        bytes / best / 1e9, bytes / layers / 1e6, bytes / best_stream / 1e9,
        100 * best_stream / best);
  }
  for (Pool& p : pools) {
    cpu::unmap_pages(p.keys);
    cpu::unmap_pages(p.values);
  }
  return 0;
}
