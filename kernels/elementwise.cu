// Element-wise kernels: residual add, SiLU·mul, dtype conversion, indexed row copies (KV-cache
// writes with conversion, logit-row gathers) and column fills. Grid-stride loops, fp32 math.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

template <typename T>
__global__ void add_kernel(T* x, const T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) + to_f32(y[i]));
}

template <typename T, typename Out>
__global__ void silu_mul_kernel(Out* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<Out>(g / (1.0f + __expf(-g)) * to_f32(up[i]));
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

// One block per row; 4-byte words (every row here is f32, i32 or an even number of bf16).
__global__ void gather_rows_kernel(uint32_t* dst, const uint32_t* src, const int32_t* src_rows, int64_t words) {
  const int64_t i = blockIdx.x, s = src_rows[i];
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) dst[i * words + w] = src[s * words + w];
}

// One block per row: dst row dst_rows[i] (of type D) <- src row i (of type S), converted.
template <typename D, typename S>
__global__ void convert_rows_kernel(D* dst, const int32_t* dst_rows, const S* src, int64_t width) {
  const int64_t i = blockIdx.x, d = dst_rows[i];
  for (int64_t w = threadIdx.x; w < width; w += blockDim.x) dst[d * width + w] = from_f32<D>(to_f32(src[i * width + w]));
}

__global__ void fill_columns_kernel(float* x, int64_t rows, int64_t cols, int64_t col_begin, float value) {
  const int64_t width = cols - col_begin, n = rows * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[(i / width) * cols + col_begin + i % width] = value;
}

}  // namespace

cudaError_t gather_rows(void* dst, const void* src, const int32_t* src_rows, int64_t n, int64_t row_bytes,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (row_bytes % 4 != 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), src_rows, row_bytes / 4);
  return cudaGetLastError();
}

cudaError_t convert_rows(void* dst, KernelType dst_t, const int32_t* dst_rows, const void* src, KernelType src_t,
                         int64_t n, int64_t width, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  TPLLAMA_DISPATCH_TYPE(dst_t, D,
                        TPLLAMA_DISPATCH_TYPE(src_t, S,
                                              convert_rows_kernel<D, S><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
                                                  static_cast<D*>(dst), dst_rows, static_cast<const S*>(src), width)));
  return cudaGetLastError();
}

cudaError_t fill_columns(float* x, int64_t rows, int64_t cols, int64_t col_begin, float value, cudaStream_t stream) {
  if (rows == 0 || col_begin >= cols) return cudaSuccess;
  fill_columns_kernel<<<blocks_for(rows * (cols - col_begin)), kThreads, 0, stream>>>(x, rows, cols, col_begin, value);
  return cudaGetLastError();
}

cudaError_t add(void* x, const void* y, int64_t n, KernelType t, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T, add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), static_cast<const T*>(y), n));
  return cudaGetLastError();
}

cudaError_t silu_mul(void* out, KernelType out_t, const void* gate, const void* up, int64_t n, KernelType t,
                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(out_t, Out,
                        TPLLAMA_DISPATCH_TYPE(t, T,
                                              silu_mul_kernel<T, Out><<<blocks_for(n), kThreads, 0, stream>>>(
                                                  static_cast<Out*>(out), static_cast<const T*>(gate),
                                                  static_cast<const T*>(up), n)));
  return cudaGetLastError();
}

cudaError_t convert(void* dst, KernelType dst_type, const void* src, KernelType src_type, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(dst_type, D,
                        TPLLAMA_DISPATCH_TYPE(src_type, S,
                                              convert_kernel<D, S><<<blocks_for(n), kThreads, 0, stream>>>(
                                                  static_cast<D*>(dst), static_cast<const S*>(src), n)));
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
