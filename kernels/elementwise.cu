// Element-wise kernels: residual add, SiLU·mul, dtype conversion. Grid-stride loops, fp32 math.
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

template <typename T>
__global__ void silu_mul_kernel(T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(gate[i]);
    gate[i] = from_f32<T>(g / (1.0f + __expf(-g)) * to_f32(up[i]));
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

}  // namespace

cudaError_t add(void* x, const void* y, int64_t n, KernelType t, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T, add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), static_cast<const T*>(y), n));
  return cudaGetLastError();
}

cudaError_t silu_mul(void* gate, const void* up, int64_t n, KernelType t, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T,
                        silu_mul_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(gate),
                                                                                  static_cast<const T*>(up), n));
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
