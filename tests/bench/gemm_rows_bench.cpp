// How the CPU GEMM's cost per row of x changes with the number of rows, on the products of a
// decode step (the 110m shape's layers: Q/K/V and gate/up fused as the model runs them). Not a
// test: a benchmark that prints numbers (scripts/bench/gemm_rows.sh runs it). On the threads asked
// for it also measures the read bandwidth and the same products over one layer held in cache, so
// each row count's time from memory can be set against both of its bounds: streaming the weights,
// and the arithmetic with no wait for memory.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/machine_limits.h"
#include "ops/cpu/threads.h"
#include "ops/weight.h"

namespace {

using tpllama::Buffer;
using tpllama::DType;
namespace cpu = tpllama::ops::cpu;

constexpr int64_t kDim = 768, kHidden = 2048;  // the 110m shape

// One layer's packed matrices: Wq, Wk, Wv, Wo (dim × dim), W1, W3 (hidden × dim), W2 (dim ×
// hidden).
struct Layer {
  Buffer q, k, v, o, gate, up, down;
};

// A seeded random (n, k) weight (the generator of --random-weights), packed for the GEMM.
Buffer packed(int64_t n, int64_t k, DType dtype, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(n * k));
  tpllama::ops::UniformFill fill;
  fill.stream = seed;
  fill.full_cols = k;
  fill.present = n;
  fill.scale = 0.05f;
  cpu::fill_uniform(w.data(), n, k, fill);
  Buffer b(cpu::packed_bytes(n, k, dtype));
  cpu::pack_weight(w.data(), n, k, dtype, b.data());
  return b;
}

struct Scratch {
  std::vector<float> x;    // (rows, hidden)
  std::vector<float> out;  // three products of hidden columns
};

// The products of one decode step's layers for `rows` tokens, as LlamaModel::forward calls them.
void step(const std::vector<Layer>& layers, int64_t rows, DType dtype, int threads, Scratch& s) {
  float* out = s.out.data();
  const int64_t stride = rows * kHidden;
  for (const Layer& l : layers) {
    const cpu::GemmProduct qkv[3] = {{out, l.q.data(), dtype, kDim},
                                     {out + stride, l.k.data(), dtype, kDim},
                                     {out + 2 * stride, l.v.data(), dtype, kDim}};
    cpu::gemm_multi(s.x.data(), rows, kDim, qkv, 3, threads);
    cpu::gemm(out, s.x.data(), rows, l.o.data(), dtype, kDim, kDim, threads);
    const cpu::GemmProduct gate_up[2] = {{out, l.gate.data(), dtype, kHidden},
                                         {out + stride, l.up.data(), dtype, kHidden}};
    cpu::gemm_multi(s.x.data(), rows, kDim, gate_up, 2, threads);
    cpu::gemm(out, s.x.data(), rows, l.down.data(), dtype, kDim, kHidden, threads);
  }
}

double seconds_of(const std::vector<Layer>& layers, int64_t rows, DType dtype, int threads,
                  int repeats, Scratch& s) {
  std::vector<double> times;
  step(layers, rows, dtype, threads, s);  // warm-up
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step(layers, rows, dtype, threads, s);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int usage() {
  std::fprintf(stderr,
               "usage: gemm_rows_bench [--layers N (6)] [--threads N (1)] [--dtype f32|bf16] "
               "[--repeats N (9)] "
               "[--rows 1,8,16,24,32]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int n_layers = 6, threads = 1, repeats = 9;
  DType dtype = DType::kF32;
  std::vector<int64_t> row_counts = {1, 8, 16, 24, 32};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--layers") {
      n_layers = std::atoi(v);
    } else if (a == "--threads") {
      threads = std::atoi(v);
    } else if (a == "--repeats") {
      repeats = std::atoi(v);
    } else if (a == "--dtype" && (std::strcmp(v, "f32") == 0 || std::strcmp(v, "bf16") == 0)) {
      dtype = std::strcmp(v, "f32") == 0 ? DType::kF32 : DType::kBF16;
    } else if (a == "--rows") {
      row_counts.clear();
      for (const char* p = v;; ++p) {  // comma-separated counts
        char* end = nullptr;
        row_counts.push_back(std::strtol(p, &end, 10));
        if (end == p || (*end != ',' && *end != '\0')) return usage();
        p = end;
        if (*p == '\0') break;
      }
    } else {
      return usage();
    }
  }
  if (n_layers < 1 || threads < 1 || repeats < 1 || row_counts.empty() ||
      *std::min_element(row_counts.begin(), row_counts.end()) < 1 ||
      *std::max_element(row_counts.begin(), row_counts.end()) > 256)
    return usage();
  cpu::apply_threads(cpu::plan_threads(threads, 0, 1));  // pinned one a core, as tpllama runs

  auto make_layers = [&](int count) {
    std::vector<Layer> layers;
    for (int l = 0; l < count; ++l) {
      const uint64_t seed = static_cast<uint64_t>(l) * 7;
      layers.push_back({packed(kDim, kDim, dtype, seed), packed(kDim, kDim, dtype, seed + 1),
                        packed(kDim, kDim, dtype, seed + 2), packed(kDim, kDim, dtype, seed + 3),
                        packed(kHidden, kDim, dtype, seed + 4),
                        packed(kHidden, kDim, dtype, seed + 5),
                        packed(kDim, kHidden, dtype, seed + 6)});
    }
    return layers;
  };
  const std::vector<Layer> layers = make_layers(n_layers);
  const std::vector<Layer> cached = make_layers(1);  // 28 MiB in f32: held in this machine's L3
  const double weights_per_layer = 4.0 * kDim * kDim + 3.0 * kHidden * kDim;
  const double bytes =
      weights_per_layer * n_layers * static_cast<double>(tpllama::dtype_size(dtype));
  Scratch s;
  s.x.assign(static_cast<size_t>(256 * kHidden), 0.25f);
  s.out.assign(static_cast<size_t>(3 * 256 * kHidden), 0.0f);

  const double bandwidth = cpu::measure_read_bandwidth(threads, size_t{1} << 30);
  const double stream = bytes / bandwidth;  // the pass's bound from streaming its weights
  std::printf(
      "gemm_rows_bench: %d layers of the 110m shape (%.1f MiB of %s weights), %d thread(s), median "
      "of %d\n",
      n_layers, bytes / (1 << 20), tpllama::dtype_name(dtype).c_str(), threads, repeats);
  std::printf("read bandwidth on %d thread(s): %.1f GB/s (stream bound of one pass: %.2f ms)\n\n",
              threads, bandwidth / 1e9, stream * 1e3);
  std::printf("%5s  %9s  %8s  %9s  %12s  %14s  %13s  %11s\n", "rows", "ms/pass", "GB/s", "GFLOP/s",
              "ms/pass/row", "in-cache ms", "stream ms", "overlap");
  for (int64_t rows : row_counts) {
    const double t = seconds_of(layers, rows, dtype, threads, repeats, s);
    // One layer's products with its weights in cache, scaled to this many layers: no wait for
    // memory.
    const double compute = seconds_of(cached, rows, dtype, threads, repeats, s) * n_layers;
    const double flops = 2.0 * static_cast<double>(rows) * weights_per_layer * n_layers;
    // How much of the shorter bound overlapped the longer: 1 when t = max(stream, compute).
    const double hidden = std::clamp((stream + compute - t) / std::min(stream, compute), 0.0, 1.0);
    std::printf("%5lld  %9.2f  %8.1f  %9.1f  %12.3f  %14.2f  %13.2f  %10.0f%%\n",
                static_cast<long long>(rows), t * 1e3, bytes / t / 1e9, flops / t / 1e9,
                t * 1e3 / static_cast<double>(rows), compute * 1e3, stream * 1e3, 100 * hidden);
  }
  return 0;
}
