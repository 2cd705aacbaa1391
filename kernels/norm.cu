// RMSNorm: one block per row, the sum of squares in fp32; the output may be of another element type
// (bf16 straight into a GEMM's input).
#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

using detail::from_f32;
using detail::to_f32;

template <typename In, typename Out>
__global__ void rms_norm_kernel(Out* out, const In* x, const float* weight, int64_t d, float eps) {
  const In* xr = x + blockIdx.x * d;
  Out* o = out + blockIdx.x * d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(detail::block_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    o[i] = from_f32<Out>(to_f32(xr[i]) * inv * weight[i]);
}

}  // namespace

cudaError_t rms_norm(void* out, KernelType out_t, const void* x, KernelType x_t,
                     const float* weight, int64_t rows, int64_t d, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(
      out_t, Out,
      TPLLAMA_DISPATCH_TYPE(
          x_t, In,
          rms_norm_kernel<In, Out><<<static_cast<unsigned>(rows), 256, 0, stream>>>(
              static_cast<Out*>(out), static_cast<const In*>(x), weight, d, eps)));
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
