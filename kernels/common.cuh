// Device helpers shared by the kernel files: element loads/stores as fp32 and block reductions.
#pragma once

#include <cuda_bf16.h>

namespace tpllama::kernels::detail {

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over a block of up to 1024 threads; every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? partial[lane] : 0.0f;
  return warp_sum(v);
}

}  // namespace tpllama::kernels::detail

// Dispatches a kernel template on KernelType.
#define TPLLAMA_DISPATCH_TYPE(t, T, ...)               \
  do {                                                 \
    if ((t) == ::tpllama::kernels::KernelType::kF32) { \
      using T = float;                                 \
      __VA_ARGS__;                                     \
    } else {                                           \
      using T = __nv_bfloat16;                         \
      __VA_ARGS__;                                     \
    }                                                  \
  } while (0)
