// GPU ops: kernels from kernels/ on the context's stream, GEMMs through cuBLAS (bf16 or f32
// inputs, fp32 compute).
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <cstring>

#include "kernels/launchers.h"
#include "ops/cuda/cuda_check.h"

namespace tpllama::ops::cuda {
namespace {

using kernels::KernelType;

cudaStream_t stream_of(const DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

KernelType kernel_type(DType d) {
  if (d == DType::kF32) return KernelType::kF32;
  if (d == DType::kBF16) return KernelType::kBF16;
  fail("GPU ops take f32 or bf16 tensors, not ", dtype_name(d));
}

cudaDataType_t blas_type(DType d) { return d == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

// Carves the context's scratch into consecutive 256-byte aligned pieces.
class Scratch {
 public:
  explicit Scratch(const DeviceContext& ctx) : base_(static_cast<char*>(ctx.scratch)), size_(ctx.scratch_bytes) {}
  void* take(size_t nbytes, const char* what) {
    const size_t at = (used_ + 255) / 256 * 256;
    if (at + nbytes > size_)
      fail(what, " needs ", nbytes, " bytes of GPU scratch; the context has ", size_ - std::min(size_, at), " left");
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
  TPLLAMA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "GPU weights are f32 or bf16, not ", dtype_name(dtype));
  return static_cast<size_t>(rows * cols) * dtype_size(dtype);
}

Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst) {
  const size_t n = static_cast<size_t>(w.numel());
  const size_t bytes = weight_bytes(w.size(0), w.size(1), dtype);
  if (dtype == DType::kF32) {
    TPLLAMA_CUDA_CHECK(cudaMemcpyAsync(dst, w.data(), bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
  } else {
    std::vector<uint16_t> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = f32_to_bf16(w.as<float>()[i]);
    TPLLAMA_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
  }
  TPLLAMA_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));  // the host copy goes out of scope
  return Weight{dst, w.size(0), w.size(1), dtype, Device::kCuda, bytes};
}

float weight_at(const Weight& w, int64_t row, int64_t col) {
  const size_t at = static_cast<size_t>(row * w.cols + col) * dtype_size(w.dtype);
  if (w.dtype == DType::kF32) {
    float v = 0;
    TPLLAMA_CUDA_CHECK(cudaMemcpy(&v, static_cast<const char*>(w.data) + at, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
  uint16_t h = 0;
  TPLLAMA_CUDA_CHECK(cudaMemcpy(&h, static_cast<const char*>(w.data) + at, sizeof h, cudaMemcpyDeviceToHost));
  return bf16_to_f32(h);
}

void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w) {
  const int m = static_cast<int>(x.size(0)), n = static_cast<int>(w.rows), k = static_cast<int>(w.cols);
  if (m == 0) return;
  Scratch scratch(ctx);
  // cuBLAS wants both inputs in one type: an f32 x meets bf16 weights as a bf16 copy in scratch.
  const void* xin = x.data();
  if (x.dtype() != w.dtype) {
    void* converted = scratch.take(static_cast<size_t>(x.numel()) * dtype_size(w.dtype), "matmul input conversion");
    TPLLAMA_CUDA_CHECK(kernels::convert(converted, kernel_type(w.dtype), x.data(), kernel_type(x.dtype()), x.numel(),
                                        stream_of(ctx)));
    xin = converted;
  }
  // f32 inputs give an f32 product only: a bf16 out gets it through scratch.
  const bool staged = w.dtype == DType::kF32 && out.dtype() == DType::kBF16;
  void* product = staged ? scratch.take(static_cast<size_t>(m) * n * sizeof(float), "matmul f32 product") : out.data();
  // Row-major out (m, n) = x (m, k) · wᵀ is, column-major, outᵀ (n, m) = w (k, n)ᵀ · xᵀ (k, m).
  const float alpha = 1.0f, beta = 0.0f;
  TPLLAMA_CUBLAS_CHECK(cublasGemmEx(static_cast<cublasHandle_t>(ctx.blas), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha,
                                    w.data, blas_type(w.dtype), k, xin, blas_type(w.dtype), k, &beta, product,
                                    staged ? CUDA_R_32F : blas_type(out.dtype()), n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  if (staged)
    TPLLAMA_CUDA_CHECK(kernels::convert(out.data(), KernelType::kBF16, product, KernelType::kF32,
                                        static_cast<int64_t>(m) * n, stream_of(ctx)));
}

void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps) {
  TPLLAMA_CUDA_CHECK(kernels::rms_norm(out.data(), x.data(), weight.as<float>(), x.size(0), x.size(1), eps,
                                       kernel_type(x.dtype()), stream_of(ctx)));
}

void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  TPLLAMA_CUDA_CHECK(kernels::rope(x.data(), cos.as<float>(), sin.as<float>(), x.size(0), n_heads, head_dim,
                                   kernel_type(x.dtype()), stream_of(ctx)));
}

void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin) {
  TPLLAMA_CHECK(table.dtype() == out.dtype(), "embedding: table ", dtype_name(table.dtype()), " vs out ",
                dtype_name(out.dtype()));
  TPLLAMA_CUDA_CHECK(kernels::embedding(out.data(), table.data(), table.size(0), tokens.as<int32_t>(), tokens.size(0),
                                        table.size(1), vocab_begin, kernel_type(out.dtype()), stream_of(ctx)));
}

void silu_mul(const DeviceContext& ctx, Tensor gate, Tensor up) {
  TPLLAMA_CUDA_CHECK(kernels::silu_mul(gate.data(), up.data(), gate.numel(), kernel_type(gate.dtype()), stream_of(ctx)));
}

void add(const DeviceContext& ctx, Tensor x, Tensor y) {
  TPLLAMA_CUDA_CHECK(kernels::add(x.data(), y.data(), x.numel(), kernel_type(x.dtype()), stream_of(ctx)));
}

void attention(const DeviceContext& ctx, Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& s) {
  const int64_t tokens = static_cast<int64_t>(kv.size());
  if (tokens == 0) return;
  // Every token reads one pool pair; its block table and context length are staged to the GPU.
  int max_blocks = 0;
  for (const KvView& v : kv) {
    TPLLAMA_CHECK(v.keys == kv[0].keys && v.values == kv[0].values, "attention: tokens of one step read one KV pool");
    max_blocks = std::max(max_blocks, (v.n_ctx + s.block_size - 1) / s.block_size);
  }
  std::vector<int32_t> staged(static_cast<size_t>(tokens) * (static_cast<size_t>(max_blocks) + 1), 0);
  for (int64_t m = 0; m < tokens; ++m) {
    const KvView& v = kv[static_cast<size_t>(m)];
    std::memcpy(staged.data() + m * max_blocks, v.blocks,
                static_cast<size_t>((v.n_ctx + s.block_size - 1) / s.block_size) * sizeof(int32_t));
    staged[static_cast<size_t>(tokens * max_blocks + m)] = v.n_ctx;
  }
  Scratch scratch(ctx);
  auto* device = static_cast<int32_t*>(scratch.take(staged.size() * sizeof(int32_t), "attention block tables"));
  TPLLAMA_CUDA_CHECK(cudaMemcpyAsync(device, staged.data(), staged.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     stream_of(ctx)));
  kernels::AttentionParams p;
  p.out = out.data();
  p.q = q.data();
  p.keys = kv[0].keys;
  p.values = kv[0].values;
  p.block_tables = device;
  p.n_ctx = device + tokens * max_blocks;
  p.tokens = tokens;
  p.max_blocks = max_blocks;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.scale = s.scale;
  TPLLAMA_CUDA_CHECK(kernels::attention(p, kernel_type(q.dtype()), stream_of(ctx)));
  // The staging vector is pageable memory: the copy has completed when cudaMemcpyAsync returns.
}

void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits) {
  TPLLAMA_CUDA_CHECK(kernels::argmax_rows(index.as<int32_t>(), value.as<float>(), logits.as<float>(), logits.size(0),
                                          logits.size(1), stream_of(ctx)));
}

}  // namespace tpllama::ops::cuda
