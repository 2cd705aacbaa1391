// Vocab-parallel embedding gather, and on the logits: the edits of penalties and biases, the row
// argmax and the log-softmax sums of scored rows.
#include <cmath>

#include "common.cuh"
#include "launchers.h"

namespace tpllama::kernels {
namespace {

template <typename T>
__global__ void embedding_kernel(T* out, const T* table, int64_t table_rows, const int32_t* tokens,
                                 int64_t d, int vocab_begin) {
  const int64_t local = static_cast<int64_t>(tokens[blockIdx.x]) - vocab_begin;
  T* o = out + blockIdx.x * d;
  const bool held = local >= 0 && local < table_rows;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    o[i] = held ? table[local * d + i] : detail::from_f32<T>(0.0f);
}

__global__ void argmax_kernel(int32_t* index, float* value, const float* logits, int64_t cols) {
  const float* row = logits + blockIdx.x * cols;
  float best = -INFINITY;  // a row of -inf (a masked shard) gives column 0 and -inf, as on the CPU
  int64_t at = cols;       // nothing seen yet: ties resolve to the lowest index below
  int bad = 0;             // a NaN or +inf: no token can be chosen from this row
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    if (row[c] > best || (row[c] == best && c < at)) {
      best = row[c];
      at = c;
    }
    bad |= !(row[c] < INFINITY);
  }
  bad = __syncthreads_or(bad);
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
    index[blockIdx.x] = bad ? -1 : static_cast<int32_t>(at_of[0] < cols ? at_of[0] : 0);
    value[blockIdx.x] = bad ? INFINITY : best_of[0];
  }
}

constexpr int kSumThreads = 256;  // a power of two: the tree below halves it

// One block of kSumThreads per requested row: per-thread sums in double, then a tree in shared
// memory.
__global__ void logit_sums_kernel(float* sums, const float* logits, int64_t cols,
                                  const int32_t* rows, const float* max, const int32_t* chosen,
                                  int64_t n) {
  const int64_t i = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(rows[i]) * cols;
  const double m = max[i];
  double sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    sum += exp(static_cast<double>(row[c]) - m);
  __shared__ double partial[kSumThreads];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[i] = static_cast<float>(partial[0]);
    const int32_t at = chosen[i];
    sums[n + i] = at >= 0 && at < cols ? row[at] : 0.0f;
  }
}

// One thread per edited cell (model/step_batch.h's LogitEdit; ops/cpu/sampling.cpp's edit_logits
// is the same arithmetic).
__global__ void edit_logits_kernel(float* logits, int64_t rows, int64_t cols, const int32_t* cells,
                                   const float* params, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = cells[2 * i], c = cells[2 * i + 1];
  if (r < 0 || r >= rows || c < 0 || c >= cols) return;
  float x = logits[r * cols + c] + params[3 * i];
  const float scale = params[3 * i + 1];
  if (scale != 1.0f) x = x > 0.0f ? x / scale : x * scale;
  logits[r * cols + c] = x - params[3 * i + 2];
}

// Block (i, chunk): row rows[i], its columns chunk * blockDim.x * 8 on, a thread a column at a
// time.
__global__ void mask_logits_kernel(float* logits, int64_t cols, const int32_t* rows,
                                   const uint32_t* words, int64_t width, int64_t first_token) {
  const int64_t i = blockIdx.x;
  const uint32_t* bits = words + i * width;
  float* row = logits + static_cast<int64_t>(rows[i]) * cols;
  const int64_t span = static_cast<int64_t>(blockDim.x) * 8;
  const int64_t end = min(cols, (static_cast<int64_t>(blockIdx.y) + 1) * span);
  for (int64_t c = static_cast<int64_t>(blockIdx.y) * span + threadIdx.x; c < end;
       c += blockDim.x) {
    const int64_t t = first_token + c;
    if (t >= 32 * width || ((bits[t >> 5] >> (t & 31)) & 1u) == 0) row[c] = -INFINITY;
  }
}

}  // namespace

cudaError_t mask_logits(float* logits, int64_t cols, const int32_t* rows, int64_t n,
                        const uint32_t* words, int64_t width, int64_t first_token,
                        cudaStream_t stream) {
  if (n == 0 || cols == 0) return cudaSuccess;
  constexpr int kMaskThreads = 256;
  const dim3 grid(static_cast<unsigned>(n),
                  static_cast<unsigned>((cols + kMaskThreads * 8 - 1) / (kMaskThreads * 8)));
  mask_logits_kernel<<<grid, kMaskThreads, 0, stream>>>(logits, cols, rows, words, width,
                                                        first_token);
  return cudaGetLastError();
}

cudaError_t logit_sums(float* sums, const float* logits, int64_t cols, const int32_t* rows,
                       const float* max, const int32_t* chosen, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  logit_sums_kernel<<<static_cast<unsigned>(n), kSumThreads, 0, stream>>>(sums, logits, cols, rows,
                                                                          max, chosen, n);
  return cudaGetLastError();
}

cudaError_t embedding(void* out, const void* table, int64_t table_rows, const int32_t* tokens,
                      int64_t rows, int64_t d, int vocab_begin, KernelType t, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  TPLLAMA_DISPATCH_TYPE(
      t, T,
      embedding_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(table), table_rows, tokens, d, vocab_begin));
  return cudaGetLastError();
}

cudaError_t edit_logits(float* logits, int64_t rows, int64_t cols, const int32_t* cells,
                        const float* params, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kEditThreads = 256;
  edit_logits_kernel<<<static_cast<unsigned>((n + kEditThreads - 1) / kEditThreads), kEditThreads,
                       0, stream>>>(logits, rows, cols, cells, params, n);
  return cudaGetLastError();
}

cudaError_t argmax_rows(int32_t* index, float* value, const float* logits, int64_t rows,
                        int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  argmax_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(index, value, logits, cols);
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
