// Vocab-parallel embedding gather and the row argmax of the logits.
#include <cfloat>

#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

template <typename T>
__global__ void embedding_kernel(T* out, const T* table, int64_t table_rows, const int32_t* tokens, int64_t d,
                                 int vocab_begin) {
  const int64_t local = static_cast<int64_t>(tokens[blockIdx.x]) - vocab_begin;
  T* o = out + blockIdx.x * d;
  const bool held = local >= 0 && local < table_rows;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = held ? table[local * d + i] : detail::from_f32<T>(0.0f);
}

__global__ void argmax_kernel(int32_t* index, float* value, const float* logits, int64_t cols) {
  const float* row = logits + blockIdx.x * cols;
  float best = -FLT_MAX;
  int64_t at = cols;  // no finite value yet: ties resolve to the lowest index below
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    if (row[c] > best || (row[c] == best && c < at)) {
      best = row[c];
      at = c;
    }
  __shared__ float best_of[256];
  __shared__ int64_t at_of[256];
  best_of[threadIdx.x] = best;
  at_of[threadIdx.x] = at;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float b = best_of[threadIdx.x + stride];
      const int64_t a = at_of[threadIdx.x + stride];
      if (b > best_of[threadIdx.x] || (b == best_of[threadIdx.x] && a < at_of[threadIdx.x])) {
        best_of[threadIdx.x] = b;
        at_of[threadIdx.x] = a;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    index[blockIdx.x] = static_cast<int32_t>(at_of[0] < cols ? at_of[0] : 0);
    value[blockIdx.x] = best_of[0];
  }
}

}  // namespace

cudaError_t embedding(void* out, const void* table, int64_t table_rows, const int32_t* tokens, int64_t rows, int64_t d,
                      int vocab_begin, KernelType t, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(t, T,
                        embedding_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(
                            static_cast<T*>(out), static_cast<const T*>(table), table_rows, tokens, d, vocab_begin));
  return cudaGetLastError();
}

cudaError_t argmax_rows(int32_t* index, float* value, const float* logits, int64_t rows, int64_t cols,
                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  argmax_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(index, value, logits, cols);
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
