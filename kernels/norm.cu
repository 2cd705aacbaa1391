// RMSNorm: one block per row, the sum of squares in fp32.
#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

using detail::from_f32;
using detail::to_f32;

template <typename T>
__global__ void rms_norm_kernel(T* out, const T* x, const float* weight, int64_t d, float eps) {
  const T* xr = x + blockIdx.x * d;
  T* o = out + blockIdx.x * d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(detail::block_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = from_f32<T>(to_f32(xr[i]) * inv * weight[i]);
}

}  // namespace

cudaError_t rms_norm(void* out, const void* x, const float* weight, int64_t rows, int64_t d, float eps, KernelType t,
                     cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T,
                        rms_norm_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(
                            static_cast<T*>(out), static_cast<const T*>(x), weight, d, eps));
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
