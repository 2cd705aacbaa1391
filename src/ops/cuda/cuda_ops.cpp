// GPU ops: kernels from kernels/ on the context's stream, GEMMs through cuBLAS (bf16 or f32
// inputs, fp32 compute).
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/launchers.h"
#include "ops/cuda/cuda_check.h"

namespace tpllama::ops::cuda {
namespace {

using kernels::KernelType;

cudaStream_t stream_of(const DeviceContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

KernelType kernel_type(DType d) {
  if (d == DType::kF32) return KernelType::kF32;
  if (d == DType::kBF16) return KernelType::kBF16;
  fail("GPU ops take f32 or bf16 tensors, not ", dtype_name(d));
}

cudaDataType_t blas_type(DType d) {
  return d == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
}

// Carves the context's scratch into consecutive 256-byte aligned pieces.
class Scratch {
 public:
  explicit Scratch(const DeviceContext& ctx)
      : base_(static_cast<char*>(ctx.scratch)), size_(ctx.scratch_bytes) {}
  void* take(size_t nbytes, const char* what) {
    const size_t at = (used_ + 255) / 256 * 256;
    if (at + nbytes > size_)
      fail(what, " needs ", nbytes, " bytes of GPU scratch; the context has ",
           size_ - std::min(size_, at), " left");
    used_ = at + nbytes;
    return base_ + at;
  }

 private:
  char* base_;
  size_t size_;
  size_t used_ = 0;
};

}  // namespace

size_t weight_bytes(int64_t rows, int64_t cols, DType dtype) {
  TPLLAMA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "GPU weights are f32 or bf16, not ",
                dtype_name(dtype));
  return static_cast<size_t>(rows * cols) * dtype_size(dtype);
}

Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst) {
  const size_t n = static_cast<size_t>(w.numel());
  const size_t bytes = weight_bytes(w.size(0), w.size(1), dtype);
  if (dtype == DType::kF32) {
    TPLLAMA_CUDA_CHECK(
        cudaMemcpyAsync(dst, w.data(), bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
  } else {
    std::vector<uint16_t> host(n);
    const float* src = w.as<float>();
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 20))
    for (size_t i = 0; i < n; ++i) host[i] = f32_to_bf16(src[i]);
    TPLLAMA_CUDA_CHECK(
        cudaMemcpyAsync(dst, host.data(), bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
  }
  TPLLAMA_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));  // the host copy goes out of scope
  return Weight{dst, w.size(0), w.size(1), dtype, Device::kCuda, bytes};
}

DType matmul_input_dtype(const Weight& w) {
  return w.dtype;
}

float weight_at(const Weight& w, int64_t row, int64_t col) {
  const size_t at = static_cast<size_t>(row * w.cols + col) * dtype_size(w.dtype);
  // The copy below is on the legacy stream, which does not wait for the ops' non-blocking one
  // (fill_weight_uniform, say, returns before its kernel has run).
  TPLLAMA_CUDA_CHECK(cudaDeviceSynchronize());
  if (w.dtype == DType::kF32) {
    float v = 0;
    TPLLAMA_CUDA_CHECK(
        cudaMemcpy(&v, static_cast<const char*>(w.data) + at, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
  uint16_t h = 0;
  TPLLAMA_CUDA_CHECK(
      cudaMemcpy(&h, static_cast<const char*>(w.data) + at, sizeof h, cudaMemcpyDeviceToHost));
  return bf16_to_f32(h);
}

void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w) {
  const int m = static_cast<int>(x.size(0)), n = static_cast<int>(w.rows),
            k = static_cast<int>(w.cols);
  if (m == 0) return;
  Scratch scratch(ctx);
  // cuBLAS wants both inputs in one type: an f32 x meets bf16 weights as a bf16 copy in scratch.
  const void* xin = x.data();
  if (x.dtype() != w.dtype) {
    void* converted = scratch.take(static_cast<size_t>(x.numel()) * dtype_size(w.dtype),
                                   "matmul input conversion");
    TPLLAMA_CUDA_CHECK(kernels::convert(converted, kernel_type(w.dtype), x.data(),
                                        kernel_type(x.dtype()), x.numel(), stream_of(ctx)));
    xin = converted;
  }
  // f32 inputs give an f32 product only: a bf16 out gets it through scratch.
  const bool staged = w.dtype == DType::kF32 && out.dtype() == DType::kBF16;
  void* product =
      staged ? scratch.take(static_cast<size_t>(m) * n * sizeof(float), "matmul f32 product")
             : out.data();
  // Row-major out (m, n) = x (m, k) · wᵀ is, column-major, outᵀ (n, m) = w (k, n)ᵀ · xᵀ (k, m).
  const float alpha = 1.0f, beta = 0.0f;
  TPLLAMA_CUBLAS_CHECK(tpllama::cuda::cublas().gemm_ex(
      static_cast<cublasHandle_t>(ctx.blas), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.data,
      blas_type(w.dtype), k, xin, blas_type(w.dtype), k, &beta, product,
      staged ? CUDA_R_32F : blas_type(out.dtype()), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (staged)
    TPLLAMA_CUDA_CHECK(kernels::convert(out.data(), KernelType::kBF16, product, KernelType::kF32,
                                        static_cast<int64_t>(m) * n, stream_of(ctx)));
}

void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps) {
  TPLLAMA_CUDA_CHECK(kernels::rms_norm(out.data(), kernel_type(out.dtype()), x.data(),
                                       kernel_type(x.dtype()), weight.as<float>(), x.size(0),
                                       x.size(1), eps, stream_of(ctx)));
}

void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  TPLLAMA_CUDA_CHECK(kernels::rope(x.data(), cos.as<float>(), sin.as<float>(), x.size(0), n_heads,
                                   head_dim, kernel_type(x.dtype()), stream_of(ctx)));
}

void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin) {
  TPLLAMA_CHECK(table.dtype() == out.dtype(), "embedding: table ", dtype_name(table.dtype()),
                " vs out ", dtype_name(out.dtype()));
  TPLLAMA_CUDA_CHECK(kernels::embedding(out.data(), table.data(), table.size(0),
                                        tokens.as<int32_t>(), tokens.size(0), table.size(1),
                                        vocab_begin, kernel_type(out.dtype()), stream_of(ctx)));
}

void silu_mul(const DeviceContext& ctx, Tensor out, Tensor gate, Tensor up) {
  TPLLAMA_CUDA_CHECK(kernels::silu_mul(out.data(), kernel_type(out.dtype()), gate.data(), up.data(),
                                       gate.numel(), kernel_type(gate.dtype()), stream_of(ctx)));
}

void add(const DeviceContext& ctx, Tensor x, Tensor y) {
  TPLLAMA_CUDA_CHECK(
      kernels::add(x.data(), y.data(), x.numel(), kernel_type(x.dtype()), stream_of(ctx)));
}

void add_bias(const DeviceContext& ctx, Tensor x, Tensor bias) {
  TPLLAMA_CUDA_CHECK(kernels::add_bias(x.data(), bias.as<float>(), x.size(0), x.size(1),
                                       kernel_type(x.dtype()), stream_of(ctx)));
}

static int sm_count() {
  static const int count = [] {
    int device = 0, n = 0;
    TPLLAMA_CUDA_CHECK(cudaGetDevice(&device));
    TPLLAMA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return count;
}

// TPLLAMA_TENSOR_CORE_ATTENTION=0 in the environment keeps prefill attention on the fp32 run
// kernel (a fallback that needs no rebuild, and the device check's comparison).
static std::atomic<bool> g_tensor_core_attention{[] {
  const char* v = std::getenv("TPLLAMA_TENSOR_CORE_ATTENTION");
  return v == nullptr || std::string(v) != "0";
}()};

bool use_tensor_core_attention(bool on) {
  return g_tensor_core_attention.exchange(on);
}

bool tensor_core_attention(int head_dim, DType kv) {
  kernels::AttentionParams p;
  p.head_dim = head_dim;
  p.use_tensor_cores = g_tensor_core_attention.load();
  return kernels::attention_uses_tensor_cores(p, kernel_type(kv));
}

void attention(const DeviceContext& ctx, Tensor out, Tensor q, const KvBatch& kv,
               const AttentionShape& s) {
  const int64_t tokens = q.size(0);
  if (tokens == 0) return;
  kernels::AttentionParams p;
  p.use_tensor_cores = g_tensor_core_attention.load();
  p.out = out.data();
  p.q = q.data();
  p.keys = kv.keys.data();
  p.values = kv.values.data();
  p.block_tables = kv.tables.as<int32_t>();
  p.seq = kv.seq.as<int32_t>();
  p.n_ctx = kv.n_ctx.as<int32_t>();
  p.tokens = tokens;
  p.max_blocks = static_cast<int>(kv.tables.size(1));
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.scale = s.scale;
  p.window = s.window;
  if (!kv.runs.empty()) {
    TPLLAMA_CHECK(kv.runs.device() == Device::kCuda, "attention: runs on ",
                  device_name(kv.runs.device()));
    p.runs = kv.runs.as<int32_t>();
    p.n_runs = static_cast<int>(kv.runs.size(0));
    p.max_run = kv.max_run;
  }
  int max_ctx = kv.max_ctx > 0 ? kv.max_ctx : p.max_blocks * s.block_size;
  if (s.window > 0) max_ctx = std::min(max_ctx, s.window);  // the positions a token reads
  p.splits = p.max_run > 1 ? 1 : decode_attention_splits(tokens, s.n_heads, max_ctx);
  if (p.splits > 1) {
    Scratch scratch(ctx);
    p.partial = static_cast<float*>(
        scratch.take(kernels::attention_partial_bytes(tokens, s.n_heads, s.head_dim, p.splits),
                     "attention split partials"));
  }
  TPLLAMA_CUDA_CHECK(kernels::attention(p, kernel_type(q.dtype()), kernel_type(out.dtype()),
                                        kernel_type(kv.keys.dtype()), stream_of(ctx)));
}

int decode_attention_splits(int64_t tokens, int n_heads, int max_ctx) {
  return kernels::attention_splits(tokens, n_heads, max_ctx, sm_count());
}

void kv_write(const DeviceContext& ctx, Tensor key_pool, Tensor value_pool, Tensor k, Tensor v,
              Tensor rows) {
  // Scattered to the pool rows, converted to the cache's dtype on the way in (f32 or bf16).
  for (auto [pool, src] : {std::pair{key_pool, k}, std::pair{value_pool, v}})
    TPLLAMA_CUDA_CHECK(kernels::convert_rows(
        pool.data(), kernel_type(pool.dtype()), rows.as<int32_t>(), src.data(),
        kernel_type(src.dtype()), src.size(0), src.size(1), stream_of(ctx)));
}

void gather_rows(const DeviceContext& ctx, Tensor out, Tensor x, Tensor rows) {
  const int64_t row_bytes = x.size(1) * static_cast<int64_t>(dtype_size(x.dtype()));
  TPLLAMA_CHECK(row_bytes % 4 == 0, "gather_rows on the GPU copies 4-byte words; a row has ",
                row_bytes, " bytes");
  TPLLAMA_CUDA_CHECK(kernels::gather_rows(out.data(), x.data(), rows.as<int32_t>(), rows.size(0),
                                          row_bytes, stream_of(ctx)));
}

void fill_columns(const DeviceContext& ctx, Tensor x, int64_t col_begin, float value) {
  TPLLAMA_CUDA_CHECK(
      kernels::fill_columns(x.as<float>(), x.size(0), x.size(1), col_begin, value, stream_of(ctx)));
}

namespace {
kernels::UniformFill kernel_fill(const UniformFill& f) {
  return kernels::UniformFill{f.stream, f.full_cols, f.row0, f.col0, f.present, f.scale, f.offset};
}
}  // namespace

void logit_sums(const DeviceContext& ctx, Tensor sums, Tensor logits, Tensor rows, Tensor max,
                Tensor chosen) {
  TPLLAMA_CUDA_CHECK(kernels::logit_sums(sums.as<float>(), logits.as<float>(), logits.size(1),
                                         rows.as<int32_t>(), max.as<float>(), chosen.as<int32_t>(),
                                         rows.numel(), stream_of(ctx)));
}

void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f) {
  const int64_t rows = out.size(0), cols = out.ndim() == 2 ? out.size(1) : 1;
  TPLLAMA_CUDA_CHECK(kernels::fill_uniform(out.data(), kernels::KernelType::kF32, rows, cols,
                                           kernel_fill(f), stream_of(ctx)));
}

// The GPU weight layout is row-major (rows, cols) in dtype (see pack_weight): drawn in place.
Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype,
                           const UniformFill& f, void* dst) {
  const kernels::KernelType t =
      dtype == DType::kBF16 ? kernels::KernelType::kBF16 : kernels::KernelType::kF32;
  TPLLAMA_CUDA_CHECK(kernels::fill_uniform(dst, t, rows, cols, kernel_fill(f), stream_of(ctx)));
  return Weight{dst, rows, cols, dtype, Device::kCuda, weight_bytes(rows, cols, dtype)};
}

std::vector<int32_t> sample_rows(const DeviceContext& ctx, Tensor logits, int n,
                                 const std::vector<SampleRow>& rows) {
  const int64_t r = logits.size(0), cols = logits.size(1);
  std::vector<int32_t> tokens(static_cast<size_t>(r));
  if (r == 0) return tokens;
  std::vector<kernels::SampleParams> params(static_cast<size_t>(r));
  for (size_t i = 0; i < params.size(); ++i) {
    const SamplingParams& p = rows[i].params;
    params[i] = {p.temperature, p.top_p, p.min_p, rows[i].uniform, p.top_k};
  }
  Scratch scratch(ctx);
  auto* device_params = static_cast<kernels::SampleParams*>(
      scratch.take(params.size() * sizeof(kernels::SampleParams), "sampling parameters"));
  auto* device_tokens =
      static_cast<int32_t*>(scratch.take(tokens.size() * sizeof(int32_t), "sampled tokens"));
  const size_t workspace_bytes = kernels::sampling_workspace_bytes(r, cols);
  void* workspace = scratch.take(workspace_bytes, "sampling workspace");
  TPLLAMA_CUDA_CHECK(cudaMemcpyAsync(device_params, params.data(),
                                     params.size() * sizeof(kernels::SampleParams),
                                     cudaMemcpyHostToDevice, stream_of(ctx)));
  TPLLAMA_CUDA_CHECK(kernels::sample_rows(device_tokens, logits.as<float>(), r, cols, n,
                                          device_params, workspace, workspace_bytes,
                                          stream_of(ctx)));
  TPLLAMA_CUDA_CHECK(cudaMemcpyAsync(tokens.data(), device_tokens, tokens.size() * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_of(ctx)));
  TPLLAMA_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  for (int64_t i = 0; i < r; ++i)
    if (tokens[static_cast<size_t>(i)] < 0)
      fail("sampled row ", i, ": its logits have no finite maximum or hold a NaN");
  return tokens;
}

size_t sampling_scratch_bytes(int64_t rows, int64_t cols) {
  // Parameters and tokens (256-byte aligned each), then the sort's workspace.
  return static_cast<size_t>(rows) * (sizeof(kernels::SampleParams) + sizeof(int32_t)) + 512 +
         kernels::sampling_workspace_bytes(rows, cols);
}

size_t scratch_bytes(int64_t max_rows, int64_t max_width) {
  // The largest carve: a matmul input converted, or an f32 product staged (4 bytes an element at
  // most), or the attention's split partials (at most 2 × SMs (token, head) pairs, < 16 MiB).
  return static_cast<size_t>(max_rows * max_width) * sizeof(float) + (size_t{16} << 20);
}

Buffer allocate(size_t nbytes) {
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, nbytes == 0 ? 1 : nbytes);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    fail("cannot allocate ", nbytes, " bytes of GPU memory (", cudaGetErrorString(rc), "; ", free,
         " of ", total, " bytes free)");
  }
  return Buffer(p, nbytes, Device::kCuda, [](void* q) { cudaFree(q); });
}

void zero(const DeviceContext& ctx, Tensor t) {
  TPLLAMA_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_of(ctx)));
}

void upload(const DeviceContext& ctx, Tensor dst, const void* host) {
  // From pageable memory the call returns once the bytes are staged: host may be reused at once.
  TPLLAMA_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), host, dst.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
}

void download(const DeviceContext& ctx, void* host, Tensor src) {
  TPLLAMA_CUDA_CHECK(
      cudaMemcpyAsync(host, src.data(), src.nbytes(), cudaMemcpyDeviceToHost, stream_of(ctx)));
  TPLLAMA_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void copy(const DeviceContext& ctx, Tensor dst, Tensor src) {
  TPLLAMA_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                     stream_of(ctx)));
}

void begin_capture(const DeviceContext& ctx) {
  // Thread-local: CUDA calls of other threads (MPI progress, say) are not drawn into the capture.
  TPLLAMA_CUDA_CHECK(cudaStreamBeginCapture(stream_of(ctx), cudaStreamCaptureModeThreadLocal));
}

void* end_capture(const DeviceContext& ctx) {
  cudaGraph_t graph = nullptr;
  TPLLAMA_CUDA_CHECK(cudaStreamEndCapture(stream_of(ctx), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TPLLAMA_CUDA_CHECK(rc);
  return exec;
}

void abort_capture(const DeviceContext& ctx) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_of(ctx), &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_of(ctx), &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // the failed capture's error is not the next call's
}

void launch_graph(const DeviceContext& ctx, void* exec) {
  TPLLAMA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream_of(ctx)));
}

void destroy_graph(void* exec) {
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

void synchronize(const DeviceContext& ctx) {
  TPLLAMA_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

uint64_t memory_available(const DeviceContext& ctx) {
  size_t free = 0, total = 0;
  TPLLAMA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

void edit_logits(const DeviceContext& ctx, Tensor logits, Tensor cells, Tensor params) {
  TPLLAMA_CUDA_CHECK(kernels::edit_logits(logits.as<float>(), logits.size(0), logits.size(1),
                                          cells.as<int32_t>(), params.as<float>(), cells.size(0),
                                          stream_of(ctx)));
}

void mask_logits(const DeviceContext& ctx, Tensor logits, Tensor rows, Tensor words,
                 int64_t first_token) {
  TPLLAMA_CUDA_CHECK(kernels::mask_logits(logits.as<float>(), logits.size(1), rows.as<int32_t>(),
                                          rows.numel(),
                                          reinterpret_cast<const uint32_t*>(words.as<int32_t>()),
                                          words.size(1), first_token, stream_of(ctx)));
}

void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits) {
  TPLLAMA_CUDA_CHECK(kernels::argmax_rows(index.as<int32_t>(), value.as<float>(),
                                          logits.as<float>(), logits.size(0), logits.size(1),
                                          stream_of(ctx)));
}

}  // namespace tpllama::ops::cuda

namespace tpllama::ops::cuda {
namespace {

// Best seconds per call of `run` over `reps` timed calls after one warm-up, with CUDA events.
template <typename F>
double best_seconds(const DeviceContext& ctx, int reps, F&& run) {
  cudaEvent_t begin = nullptr, end = nullptr;
  TPLLAMA_CUDA_CHECK(cudaEventCreate(&begin));
  TPLLAMA_CUDA_CHECK(cudaEventCreate(&end));
  run();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    TPLLAMA_CUDA_CHECK(cudaEventRecord(begin, stream_of(ctx)));
    run();
    TPLLAMA_CUDA_CHECK(cudaEventRecord(end, stream_of(ctx)));
    TPLLAMA_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    TPLLAMA_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    best = std::min(best, static_cast<double>(ms) * 1e-3);
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return best;
}

}  // namespace

double measure_copy_bandwidth(const DeviceContext& ctx, size_t bytes) {
  Buffer src = allocate(bytes), dst = allocate(bytes);
  TPLLAMA_CUDA_CHECK(cudaMemsetAsync(src.data(), 1, bytes, stream_of(ctx)));
  const double seconds = best_seconds(ctx, 5, [&] {
    TPLLAMA_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream_of(ctx)));
  });
  return 2.0 * static_cast<double>(bytes) / seconds;
}

double measure_gemm_flops(const DeviceContext& ctx, DType dtype, int64_t n) {
  const size_t es = dtype_size(dtype), elements = static_cast<size_t>(n * n);
  Buffer a = allocate(elements * es), b = allocate(elements * es), c = allocate(elements * es);
  // Random operands: a GPU multiplying zeros draws less power and clocks higher than on real data.
  std::vector<float> host(elements);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (float& v : host) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1.0p-23f;
  }
  const Tensor f32(host.data(), DType::kF32, {n, n});
  pack_weight(ctx, f32, dtype, a.data());
  pack_weight(ctx, f32, dtype, b.data());
  const int dim = static_cast<int>(n);
  const float alpha = 1.0f, beta = 0.0f;
  const double seconds = best_seconds(ctx, 10, [&] {
    TPLLAMA_CUBLAS_CHECK(tpllama::cuda::cublas().gemm_ex(
        static_cast<cublasHandle_t>(ctx.blas), CUBLAS_OP_T, CUBLAS_OP_N, dim, dim, dim, &alpha,
        a.data(), blas_type(dtype), dim, b.data(), blas_type(dtype), dim, &beta, c.data(),
        blas_type(dtype), dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds;
}

}  // namespace tpllama::ops::cuda
