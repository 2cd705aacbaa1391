// Sampling on the logits, one draw per row, with the CPU sampler's definition
// (ops/cpu/sampling.h): each row's first n logits are sorted by value, descending, ties by lower
// token id (a stable segmented radix sort of (logit, id) pairs whose ids start ascending). Every
// truncation then keeps a prefix of that order: top-k its first k; min-p those whose weight
// exp((logit - max) / T) is at least min_p; top-p the shortest prefix whose weight reaches top_p of
// the top-k mass (or of the whole row's without top-k). The draw is the first kept entry whose
// cumulative weight exceeds u times the kept mass. Weights and sums are fp64, as on the CPU.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <cfloat>

#include "launchers.h"

namespace tpllama::kernels {
namespace {

constexpr int kThreads = 256;
constexpr double kTopPSlack =
    1e-9;  // as the CPU: a set reaching top_p in real arithmetic stays reached

struct Workspace {
  float* keys = nullptr;  // (rows, cols) sorted logits
  int32_t* ids_in = nullptr;
  int32_t* ids = nullptr;  // (rows, cols) their token ids
  int32_t* begin = nullptr;
  int32_t* end = nullptr;
  void* temp = nullptr;
  size_t temp_bytes = 0;
};

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

// Carves the workspace; temp_bytes from CUB's own query.
cudaError_t carve(void* base, size_t bytes, int64_t rows, int64_t cols, Workspace* w) {
  const size_t cells = static_cast<size_t>(rows * cols);
  char* p = static_cast<char*>(base);
  w->keys = reinterpret_cast<float*>(p);
  p += align256(cells * sizeof(float));
  w->ids_in = reinterpret_cast<int32_t*>(p);
  p += align256(cells * sizeof(int32_t));
  w->ids = reinterpret_cast<int32_t*>(p);
  p += align256(cells * sizeof(int32_t));
  w->begin = reinterpret_cast<int32_t*>(p);
  p += align256(static_cast<size_t>(rows) * sizeof(int32_t));
  w->end = reinterpret_cast<int32_t*>(p);
  p += align256(static_cast<size_t>(rows) * sizeof(int32_t));
  w->temp = p;
  const size_t used = static_cast<size_t>(p - static_cast<char*>(base));
  if (base != nullptr && used > bytes) return cudaErrorInvalidValue;
  w->temp_bytes = base != nullptr ? bytes - used : 0;
  return cudaSuccess;
}

__global__ void prepare_kernel(int32_t* ids, int32_t* begin, int32_t* end, int64_t cols, int n) {
  const int64_t r = blockIdx.x;
  for (int j = threadIdx.x; j < n; j += blockDim.x) ids[r * cols + j] = j;
  if (threadIdx.x == 0) {
    begin[r] = static_cast<int32_t>(r * cols);
    end[r] = static_cast<int32_t>(r * cols + n);
  }
}

using Scan = cub::BlockScan<double, kThreads>;
using Reduce = cub::BlockReduce<double, kThreads>;

// Length of the shortest prefix of w (first `len` entries) whose sum reaches target (len if none).
__device__ int prefix_reaching(const float* keys, float top, double temperature, int len,
                               double target, typename Scan::TempStorage& scan) {
  __shared__ double carried;
  __shared__ int found;
  if (threadIdx.x == 0) {
    carried = 0.0;
    found = len;
  }
  __syncthreads();
  for (int base = 0; base < len; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const double w = j < len ? exp((static_cast<double>(keys[j]) - top) / temperature) : 0.0;
    double cum = 0.0, tile = 0.0;
    Scan(scan).InclusiveSum(w, cum, tile);
    cum += carried;
    if (j < len && cum >= target) atomicMin(&found, j + 1);
    __syncthreads();
    if (threadIdx.x == 0) carried += tile;
    __syncthreads();
    if (found < len) break;
  }
  return found;
}

// One block per row: the truncations as prefix lengths, then the draw.
__global__ void draw_kernel(int32_t* tokens, const Workspace w, int64_t cols, int n,
                            const SampleParams* params) {
  __shared__ typename Scan::TempStorage scan;
  __shared__ typename Reduce::TempStorage reduce;
  __shared__ double total_shared;
  __shared__ int min_p_len;
  const int64_t r = blockIdx.x;
  const SampleParams p = params[r];
  const float* keys = w.keys + r * cols;
  const float top = keys[0];
  if (!isfinite(top)) {  // no finite maximum: the host reports the row
    if (threadIdx.x == 0) tokens[r] = -1;
    return;
  }
  const double t = p.temperature;
  const int k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
  // Mass of the top-k set (the whole row without top-k): what top-p measures against.
  double part = 0.0;
  for (int j = threadIdx.x; j < k; j += kThreads)
    part += exp((static_cast<double>(keys[j]) - top) / t);
  const double total = Reduce(reduce).Sum(part);
  if (threadIdx.x == 0) {
    total_shared = total;
    min_p_len = k;
  }
  __syncthreads();
  // min-p: the weights fall along the order, so those below the bound are a suffix.
  const double min_weight = fmin(fmax(p.min_p, 0.0), 1.0);
  if (min_weight > 0.0)
    for (int j = threadIdx.x; j < k; j += kThreads)
      if (exp((static_cast<double>(keys[j]) - top) / t) < min_weight) atomicMin(&min_p_len, j);
  __syncthreads();
  int len = min(k, min_p_len);
  if (p.top_p < 1.0) {
    const int reach =
        prefix_reaching(keys, top, t, k, p.top_p * total_shared * (1.0 - kTopPSlack), scan);
    len = min(len, reach);
  }
  len = max(len, 1);
  // The kept mass, then the first entry whose cumulative weight exceeds u of it.
  part = 0.0;
  for (int j = threadIdx.x; j < len; j += kThreads)
    part += exp((static_cast<double>(keys[j]) - top) / t);
  __syncthreads();
  const double kept = Reduce(reduce).Sum(part);
  __shared__ double kept_shared;
  if (threadIdx.x == 0) kept_shared = kept;
  __syncthreads();
  // prefix_reaching finds cum >= target; the draw wants cum > u * kept: the next double up.
  const double target = nextafter(p.uniform * kept_shared, DBL_MAX);
  const int chosen = prefix_reaching(keys, top, t, len, target, scan);
  if (threadIdx.x == 0) tokens[r] = w.ids[r * cols + min(chosen, len) - 1];
}

}  // namespace

size_t sampling_workspace_bytes(int64_t rows, int64_t cols) {
  Workspace w;
  carve(nullptr, 0, rows, cols, &w);
  const size_t fixed = reinterpret_cast<size_t>(w.temp);  // offsets from a null base
  size_t temp = 0;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, temp, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(rows * cols), static_cast<int>(rows), static_cast<int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), 0, 32);
  return fixed + align256(temp);
}

cudaError_t sample_rows(int32_t* tokens, const float* logits, int64_t rows, int64_t cols, int n,
                        const SampleParams* params, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (n < 1 || n > cols || rows * cols > 0x7fffffff) return cudaErrorInvalidValue;
  Workspace w;
  cudaError_t rc = carve(workspace, workspace_bytes, rows, cols, &w);
  if (rc != cudaSuccess) return rc;
  prepare_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(w.ids_in, w.begin, w.end,
                                                                       cols, n);
  rc = cub::DeviceSegmentedRadixSort::SortPairsDescending(
      w.temp, w.temp_bytes, logits, w.keys, w.ids_in, w.ids, static_cast<int>(rows * cols),
      static_cast<int>(rows), w.begin, w.end, 0, 32, stream);
  if (rc != cudaSuccess) return rc;
  draw_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(tokens, w, cols, n, params);
  return cudaGetLastError();
}

}  // namespace tpllama::kernels
