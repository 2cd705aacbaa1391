// Rotate-half RoPE: one thread per (row, head, pair); the angles come in as per-row cos/sin tables
// (computed on the host in double, Llama-3 scaling included).
#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

using detail::from_f32;
using detail::to_f32;

template <typename T>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, int64_t rows, int n_heads,
                            int head_dim) {
  const int half = head_dim / 2;
  const int64_t total = rows * n_heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / (int64_t{n_heads} * half);
    const int h = static_cast<int>(i / half % n_heads), j = static_cast<int>(i % half);
    T* v = x + (r * n_heads + h) * head_dim;
    const float a = to_f32(v[j]), b = to_f32(v[j + half]);
    const float c = cos[r * half + j], s = sin[r * half + j];
    v[j] = from_f32<T>(a * c - b * s);
    v[j + half] = from_f32<T>(a * s + b * c);
  }
}

}  // namespace

cudaError_t rope(void* x, const float* cos, const float* sin, int64_t rows, int n_heads,
                 int head_dim, KernelType t, cudaStream_t stream) {
  const int64_t total = rows * n_heads * (head_dim / 2);
  if (total == 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535));
  TPLLAMA_DISPATCH_TYPE(t, T,
                        rope_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(x), cos, sin,
                                                                   rows, n_heads, head_dim));
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
