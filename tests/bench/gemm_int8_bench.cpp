// The CPU GEMM with f32, bf16 and int8 weights on the products of the 110m model (QKV, gate+up,
// down, the head) at decode and prefill heights, from memory: each timed call reads a different
// copy of the weights, the copies together far larger than the last-level cache. Prints medians of
// time, GB/s of weights and GFLOP/s, and how many times faster int8 runs than bf16 and f32
// (int8/bf16 = bf16 time / int8 time); then the error of int8 products against the exact f32
// product on Gaussian values. Not a test: nothing registers it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/threads.h"
#include "ops/weight.h"

namespace {

using tpllama::Buffer;
using tpllama::DType;
namespace cpu = tpllama::ops::cpu;

struct Shape {
  const char* name;
  int64_t n, k;
};
// dim 768, hidden 2048, vocab 32000.
constexpr Shape kShapes[] = {
    {"qkv", 2304, 768}, {"gate+up", 4096, 768}, {"down", 768, 2048}, {"head", 32000, 768}};
constexpr DType kDtypes[3] = {DType::kF32, DType::kBF16, DType::kI8};

struct Options {
  int threads = 2, repeats = 9;
  int64_t pool_mib = 256;  // weight copies per shape and dtype: several times any L3 of this class
  std::vector<int64_t> rows = {1, 4, 32, 128};
  bool accuracy = true;
};

// Copies of one packed weight, used in turn so that no call finds its weights in cache.
struct Pool {
  std::vector<Buffer> copies;
  size_t bytes = 0;
  size_t next = 0;
  const void* take() { return copies[next++ % copies.size()].data(); }
};

Pool make_pool(const Shape& s, DType dtype, int64_t pool_mib) {
  std::vector<float> w(static_cast<size_t>(s.n * s.k));
  tpllama::ops::UniformFill fill;
  fill.stream = static_cast<uint64_t>(s.n * 31 + s.k);
  fill.full_cols = s.k;
  fill.present = s.n;
  fill.scale = 0.05f;
  cpu::fill_uniform(w.data(), s.n, s.k, fill);
  Pool pool;
  pool.bytes = cpu::packed_bytes(s.n, s.k, dtype);
  const size_t count = std::max<size_t>(2, static_cast<size_t>(pool_mib << 20) / pool.bytes + 1);
  pool.copies.emplace_back(pool.bytes);
  cpu::pack_weight(w.data(), s.n, s.k, dtype, pool.copies[0].data());
  for (size_t i = 1; i < count; ++i) {
    pool.copies.emplace_back(pool.bytes);
    std::memcpy(pool.copies[i].data(), pool.copies[0].data(), pool.bytes);
  }
  return pool;
}

// Seconds of one call, averaged over a pass over every copy of the weights (at least four calls).
double pass_seconds(Pool& pool, const Shape& s, DType dtype, int64_t m, int threads,
                    const std::vector<float>& x, std::vector<float>& out) {
  const size_t calls = std::max<size_t>(pool.copies.size(), 4);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t c = 0; c < calls; ++c)
    cpu::gemm(out.data(), x.data(), m, pool.take(), dtype, s.n, s.k, threads);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(calls);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per dtype, the median time of a call; per ratio, the median of the ratios of the same repeat.
// The three dtypes take turns within each repeat, so a neighbour's burst on this shared machine
// slows all three of a repeat rather than one dtype's whole series.
struct Timing {
  double seconds[3];
  double int8_over_bf16, int8_over_f32;
};

Timing time_rows(Pool* pools, const Shape& s, int64_t m, const Options& o,
                 const std::vector<float>& x, std::vector<float>& out) {
  for (size_t d = 0; d < 3; ++d)
    pass_seconds(pools[d], s, kDtypes[d], m, o.threads, x, out);  // warm-up
  std::vector<double> t[3], over_bf16, over_f32;
  for (int r = 0; r < o.repeats; ++r) {
    double now[3];
    for (size_t d = 0; d < 3; ++d)
      t[d].push_back(now[d] = pass_seconds(pools[d], s, kDtypes[d], m, o.threads, x, out));
    over_bf16.push_back(now[1] / now[2]);
    over_f32.push_back(now[0] / now[2]);
  }
  return {{median(t[0]), median(t[1]), median(t[2])}, median(over_bf16), median(over_f32)};
}

void speed(const Options& o) {
  std::printf(
      "gemm_int8_bench: %d thread(s), median of %d passes over %lld MiB of weight copies each\n",
      o.threads, o.repeats, static_cast<long long>(o.pool_mib));
  std::printf("int8 kernels: m=1 %s, m=%lld+ %s; group %lld\n\n", cpu::int8_kernel_name(1),
              static_cast<long long>(cpu::kInt8QuantizedRows),
              cpu::int8_kernel_name(cpu::kInt8QuantizedRows),
              static_cast<long long>(cpu::kInt8Group));
  std::printf("%-8s %5s  %10s %10s %10s  %7s %8s %7s  %8s %8s %8s  %9s %9s\n", "product", "m",
              "f32 us", "bf16 us", "int8 us", "f32GB/s", "bf16GB/s", "i8GB/s", "f32 GF/s",
              "bf16GF/s", "i8 GF/s", "int8/bf16", "int8/f32");
  const int64_t most_rows = *std::max_element(o.rows.begin(), o.rows.end());
  std::vector<double> total(o.rows.size() * 3, 0.0);
  for (const Shape& s : kShapes) {
    std::vector<float> x(static_cast<size_t>(most_rows * s.k)),
        out(static_cast<size_t>(most_rows * s.n));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    Pool pools[3] = {make_pool(s, kDtypes[0], o.pool_mib), make_pool(s, kDtypes[1], o.pool_mib),
                     make_pool(s, kDtypes[2], o.pool_mib)};
    for (size_t i = 0; i < o.rows.size(); ++i) {
      const Timing t = time_rows(pools, s, o.rows[i], o, x, out);
      const double flops = 2.0 * static_cast<double>(o.rows[i] * s.n * s.k);
      std::printf(
          "%-8s %5lld  %10.1f %10.1f %10.1f  %7.1f %8.1f %7.1f  %8.1f %8.1f %8.1f  %9.2f %9.2f\n",
          s.name, static_cast<long long>(o.rows[i]), t.seconds[0] * 1e6, t.seconds[1] * 1e6,
          t.seconds[2] * 1e6, pools[0].bytes / t.seconds[0] / 1e9,
          pools[1].bytes / t.seconds[1] / 1e9, pools[2].bytes / t.seconds[2] / 1e9,
          flops / t.seconds[0] / 1e9, flops / t.seconds[1] / 1e9, flops / t.seconds[2] / 1e9,
          t.int8_over_bf16, t.int8_over_f32);
      for (size_t d = 0; d < 3; ++d) total[i * 3 + d] += t.seconds[d];
    }
  }
  std::printf(
      "\nall four products (one layer's QKV, gate+up, down, and the head), from the median "
      "times:\n");
  for (size_t i = 0; i < o.rows.size(); ++i)
    std::printf("%-8s %5lld  %10.1f %10.1f %10.1f  %54s  %9.2f %9.2f\n", "sum",
                static_cast<long long>(o.rows[i]), total[i * 3] * 1e6, total[i * 3 + 1] * 1e6,
                total[i * 3 + 2] * 1e6, "", total[i * 3 + 1] / total[i * 3 + 2],
                total[i * 3] / total[i * 3 + 2]);
}

// Error of int8 products against the exact product of the f32 values, relative to the RMS of the
// exact outputs: max and mean over the outputs. x Gaussian; w Gaussian, or Gaussian with one value
// in 200 eight times larger (the outliers of trained weights, which set their group's scale).
void accuracy(const Options& o) {
  std::printf(
      "\nint8 error against the exact f32 product, relative to the outputs' RMS (group %lld):\n",
      static_cast<long long>(cpu::kInt8Group));
  std::printf("%-8s %-9s %5s  %-18s  %10s %10s\n", "product", "weights", "m", "kernel", "max",
              "mean");
  for (const Shape& s : {Shape{"k768", 512, 768}, Shape{"k2048", 512, 2048}})
    for (bool outliers : {false, true}) {
      std::mt19937 rng(11);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_int_distribution<int> one_in(0, 199);
      std::vector<float> w(static_cast<size_t>(s.n * s.k));
      for (float& v : w) v = normal(rng) * (outliers && one_in(rng) == 0 ? 8.0f : 1.0f);
      Buffer packed(cpu::packed_bytes(s.n, s.k, DType::kI8));
      cpu::pack_weight(w.data(), s.n, s.k, DType::kI8, packed.data());
      for (int64_t m : {int64_t{1}, int64_t{32}}) {
        std::vector<float> x(static_cast<size_t>(m * s.k)), out(static_cast<size_t>(m * s.n));
        for (float& v : x) v = normal(rng);
        cpu::gemm(out.data(), x.data(), m, packed.data(), DType::kI8, s.n, s.k, o.threads);
        std::vector<double> exact(out.size());
        double sq = 0;
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < s.n; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < s.k; ++c)
              dot += static_cast<double>(x[r * s.k + c]) * w[j * s.k + c];
            exact[r * s.n + j] = dot;
            sq += dot * dot;
          }
        const double rms = std::sqrt(sq / static_cast<double>(exact.size()));
        double most = 0, sum = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
          const double e = std::fabs(out[i] - exact[i]) / rms;
          most = std::max(most, e);
          sum += e;
        }
        std::printf("%-8s %-9s %5lld  %-18s  %10.2e %10.2e\n", s.name,
                    outliers ? "outliers" : "gaussian", static_cast<long long>(m),
                    cpu::int8_kernel_name(m), most, sum / static_cast<double>(exact.size()));
      }
    }
}

int usage() {
  std::fprintf(stderr,
               "usage: gemm_int8_bench [--threads N (2)] [--repeats N (9)] [--pool-mib N (512)] "
               "[--rows 1,4,32,128] [--accuracy-only] [--speed-only] [--no-vnni] [--portable]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool run_speed = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--accuracy-only") {
      run_speed = false;
      continue;
    }
    if (a == "--speed-only") {
      o.accuracy = false;
      continue;
    }
    if (a == "--portable") {  // every kernel portable, as on a CPU without AVX-512
      cpu::force_portable_gemm(true);
      continue;
    }
    if (a == "--no-vnni") {  // as on AVX-512 without VNNI (Skylake-SP): int8 widens at every height
      cpu::force_no_vnni(true);
      continue;
    }
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--threads") {
      o.threads = std::atoi(v);
    } else if (a == "--repeats") {
      o.repeats = std::atoi(v);
    } else if (a == "--pool-mib") {
      o.pool_mib = std::atoll(v);
    } else if (a == "--rows") {
      o.rows.clear();
      for (const char* p = v;; ++p) {  // comma-separated counts
        char* end = nullptr;
        o.rows.push_back(std::strtol(p, &end, 10));
        if (end == p || (*end != ',' && *end != '\0')) return usage();
        p = end;
        if (*p == '\0') break;
      }
    } else {
      return usage();
    }
  }
  if (o.threads < 1 || o.repeats < 1 || o.pool_mib < 1 || o.rows.empty() ||
      *std::min_element(o.rows.begin(), o.rows.end()) < 1)
    return usage();
  cpu::apply_threads(cpu::plan_threads(o.threads, 0, 1));  // pinned one a core, as tpllama runs
  if (run_speed) speed(o);
  if (o.accuracy) accuracy(o);
  return 0;
}
