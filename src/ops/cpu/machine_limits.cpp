// Bandwidth and GEMM measurements (see machine_limits.h).
#include "ops/cpu/machine_limits.h"

// GCC 12 warns inside its own AVX-512 headers (the self-initialised "undefined" vectors).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/memory.h"

namespace tpllama::ops::cpu {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums n floats (n a multiple of 64) with eight independent accumulators so loads, not adds, bound
// it.
__attribute__((target("avx512f"))) float read_avx512(const float* p, size_t n) {
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 128)
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(p + i + 16 * j));
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_reduce_add_ps(acc[0]);
}

float read_portable(const float* p, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + static_cast<size_t>(j)];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

}  // namespace

double measure_read_bandwidth(int threads, size_t bytes) {
  const size_t chunk = 128 * sizeof(float) * static_cast<size_t>(threads);
  bytes = std::max(chunk, bytes / chunk * chunk);
  Buffer buf(map_pages(bytes, /*reserve=*/true), bytes, Device::kCpu,
             unmap_pages);  // on huge pages, as the engine's weights
  auto* data = static_cast<float*>(buf.data());
  const size_t n = bytes / sizeof(float);
  const bool avx512 = cpu_has_avx512();
#pragma omp parallel num_threads(threads)
  {  // first touch by the thread that reads it
    const size_t per = n / static_cast<size_t>(threads),
                 t = static_cast<size_t>(omp_get_thread_num());
    for (size_t i = t * per; i < (t + 1) * per; ++i) data[i] = 1.0f;
  }
  // The best pass of all the threads, half of them and one, each over at least 0.3 s and 12
  // passes: on a shared machine the read rate moves by 2-3x from second to second (17-54 GB/s
  // here), fewer threads sometimes read faster than all of them, and a run must never beat its
  // limit.
  double best = 0;
  volatile float sink = 0;
  std::vector<int> teams = {threads};
  if (threads / 2 > 1) teams.push_back(threads / 2);
  if (threads > 1) teams.push_back(1);
  for (const int team : teams) {
    const size_t per = n / static_cast<size_t>(team) / 128 * 128;  // whole 128-float rows a thread
    const double start = now_seconds();
    for (int pass = 0; pass < 400 && (pass < 12 || now_seconds() - start < 0.3); ++pass) {
      float total = 0;
      const double t0 = now_seconds();
#pragma omp parallel num_threads(team) reduction(+ : total)
      {
        const size_t t = static_cast<size_t>(omp_get_thread_num());
        total += avx512 ? read_avx512(data + t * per, per) : read_portable(data + t * per, per);
      }
      const double dt = now_seconds() - t0;
      sink = sink + total;
      if (pass > 0)
        best = std::max(best,
                        static_cast<double>(per * static_cast<size_t>(team) * sizeof(float)) / dt);
    }
  }
  return best;
}

double measure_read_rate(int threads, const std::vector<ByteSpan>& spans) {
  const bool avx512 = cpu_has_avx512();
  double best = 0;
  volatile float sink = 0;
  const double start = now_seconds();
  for (int pass = 0; pass < 400 && (pass < 12 || now_seconds() - start < 0.3); ++pass) {
    float total = 0;
    size_t read = 0;
    const double t0 = now_seconds();
    for (const ByteSpan& s : spans) {
      // Whole 128-float rows from the span's first 64-byte boundary, split over the threads.
      const auto first = (reinterpret_cast<uintptr_t>(s.data) + 63) / 64 * 64;
      const size_t skip = first - reinterpret_cast<uintptr_t>(s.data);
      if (s.bytes <= skip) continue;
      const size_t per =
          (s.bytes - skip) / sizeof(float) / static_cast<size_t>(threads) / 128 * 128;
      if (per == 0) continue;
      const auto* data = reinterpret_cast<const float*>(first);
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const size_t t = static_cast<size_t>(omp_get_thread_num());
        total += avx512 ? read_avx512(data + t * per, per) : read_portable(data + t * per, per);
      }
      read += per * static_cast<size_t>(threads) * sizeof(float);
    }
    const double dt = now_seconds() - t0;
    sink = sink + total;
    if (pass > 0 && dt > 0) best = std::max(best, static_cast<double>(read) / dt);
  }
  return best;
}

double measure_gemm_flops(int threads, DType dtype, int64_t n) {
  std::vector<float> w(static_cast<size_t>(n * n)), x(static_cast<size_t>(n * n)),
      out(static_cast<size_t>(n * n));
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
    x[i] = static_cast<float>(i % 5) * 0.02f - 0.04f;
  }
  Buffer packed(packed_bytes(n, n, dtype));
  pack_weight(w.data(), n, n, dtype, packed.data());
  // The best of 8 after a warm-up (about half a second at 2 cores): on a shared machine a
  // neighbour's burst in one or two of them no longer sets the peak below what the run achieves.
  double best = 0;
  for (int rep = 0; rep < 9; ++rep) {
    const double t0 = now_seconds();
    gemm(out.data(), x.data(), n, packed.data(), dtype, n, n, threads);
    const double dt = now_seconds() - t0;
    if (rep > 0) best = std::max(best, 2.0 * static_cast<double>(n) * n * n / dt);
  }
  return best;
}

}  // namespace tpllama::ops::cpu
