// Element-wise kernels: residual add, SiLU·mul, dtype conversion, indexed row copies (KV-cache
// writes with conversion, logit-row gathers), column fills and the seeded fill of benchmark
// weights. Grid-stride loops, fp32 math.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

template <typename T>
__global__ void add_kernel(T* x, const T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) + to_f32(y[i]));
}

template <typename T>
__global__ void add_bias_kernel(T* x, const float* bias, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) + bias[i % cols]);
}

template <typename T, typename Out>
__global__ void silu_mul_kernel(Out* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<Out>(g / (1.0f + __expf(-g)) * to_f32(up[i]));
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

// One block per row; 4-byte words (every row here is f32, i32 or an even number of bf16).
__global__ void gather_rows_kernel(uint32_t* dst, const uint32_t* src, const int32_t* src_rows,
                                   int64_t words) {
  const int64_t i = blockIdx.x, s = src_rows[i];
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) dst[i * words + w] = src[s * words + w];
}

// One block per row: dst row dst_rows[i] (of type D) <- src row i (of type S), converted.
template <typename D, typename S>
__global__ void convert_rows_kernel(D* dst, const int32_t* dst_rows, const S* src, int64_t width) {
  const int64_t i = blockIdx.x, d = dst_rows[i];
  for (int64_t w = threadIdx.x; w < width; w += blockDim.x)
    dst[d * width + w] = from_f32<D>(to_f32(src[i * width + w]));
}

__global__ void fill_columns_kernel(float* x, int64_t rows, int64_t cols, int64_t col_begin,
                                    float value) {
  const int64_t width = cols - col_begin, n = rows * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[(i / width) * cols + col_begin + i % width] = value;
}

__device__ uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The CPU's fill bit for bit: u is exact in double, rounded once to float, and fmaf rounds once
// (no contraction question).
template <typename T>
__global__ void fill_uniform_kernel(T* out, int64_t rows, int64_t cols, UniformFill f) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float v = 0.0f;
    if (r < f.present) {
      const uint64_t z =
          splitmix64(f.stream + static_cast<uint64_t>((f.row0 + r) * f.full_cols + f.col0 + c));
      const float u = __double2float_rn(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
      v = fmaf(f.scale, u, f.offset);
    }
    out[i] = from_f32<T>(v);
  }
}

}  // namespace

cudaError_t fill_uniform(void* out, KernelType t, int64_t rows, int64_t cols, const UniformFill& f,
                         cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T,
                        fill_uniform_kernel<T><<<blocks_for(rows * cols), kThreads, 0, stream>>>(
                            static_cast<T*>(out), rows, cols, f));
  return cudaGetLastError();
}

cudaError_t gather_rows(void* dst, const void* src, const int32_t* src_rows, int64_t n,
                        int64_t row_bytes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (row_bytes % 4 != 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), src_rows, row_bytes / 4);
  return cudaGetLastError();
}

cudaError_t convert_rows(void* dst, KernelType dst_t, const int32_t* dst_rows, const void* src,
                         KernelType src_t, int64_t n, int64_t width, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  TPLLAMA_DISPATCH_TYPE(
      dst_t, D,
      TPLLAMA_DISPATCH_TYPE(
          src_t, S,
          convert_rows_kernel<D, S><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
              static_cast<D*>(dst), dst_rows, static_cast<const S*>(src), width)));
  return cudaGetLastError();
}

cudaError_t fill_columns(float* x, int64_t rows, int64_t cols, int64_t col_begin, float value,
                         cudaStream_t stream) {
  if (rows == 0 || col_begin >= cols) return cudaSuccess;
  fill_columns_kernel<<<blocks_for(rows * (cols - col_begin)), kThreads, 0, stream>>>(
      x, rows, cols, col_begin, value);
  return cudaGetLastError();
}

cudaError_t add(void* x, const void* y, int64_t n, KernelType t, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T,
                        add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                            static_cast<T*>(x), static_cast<const T*>(y), n));
  return cudaGetLastError();
}

cudaError_t add_bias(void* x, const float* bias, int64_t rows, int64_t cols, KernelType t,
                     cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T,
                        add_bias_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                            static_cast<T*>(x), bias, n, cols));
  return cudaGetLastError();
}

cudaError_t silu_mul(void* out, KernelType out_t, const void* gate, const void* up, int64_t n,
                     KernelType t, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(
      out_t, Out,
      TPLLAMA_DISPATCH_TYPE(
          t, T,
          silu_mul_kernel<T, Out><<<blocks_for(n), kThreads, 0, stream>>>(
              static_cast<Out*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n)));
  return cudaGetLastError();
}

cudaError_t convert(void* dst, KernelType dst_type, const void* src, KernelType src_type, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(
      dst_type, D,
      TPLLAMA_DISPATCH_TYPE(src_type, S,
                            convert_kernel<D, S><<<blocks_for(n), kThreads, 0, stream>>>(
                                static_cast<D*>(dst), static_cast<const S*>(src), n)));
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
