// What this machine can do, measured: the roofline `tpllama bench` compares its phases against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tpllama::ops::cpu {

// Read bandwidth in bytes/s: best of several streaming passes over `bytes` (far larger than the
// caches) split over `threads` threads of the current pool, each reading its own contiguous part.
double measure_read_bandwidth(int threads, size_t bytes);

// The rate in bytes/s at which `threads` threads read the given host memory (a rank's weights,
// each span split over the threads): the best of passes over at least 0.3 s. What a decode step
// must read, at best; above the streaming rate where caches hold part of it.
struct ByteSpan {
  const void* data;
  size_t bytes;
};
double measure_read_rate(int threads, const std::vector<ByteSpan>& spans);

// FLOP/s of the project's own GEMM (ops::matmul's kernel) on an (n × n) · (n × n)ᵀ product with
// weights held as dtype: best of a few runs.
double measure_gemm_flops(int threads, DType dtype, int64_t n);

}  // namespace tpllama::ops::cpu
