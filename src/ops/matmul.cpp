// Matrix products: validate, then the project's CPU GEMM or cuBLAS.
#include "ops/matmul.h"

#include <initializer_list>

#include "core/error.h"
#include "ops/cpu/gemm.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

namespace {

void require_matmul(const char* op, const DeviceContext& ctx, const Tensor& out, const Tensor& x,
                    const Weight& w) {
  TPLLAMA_CHECK(x.ndim() == 2 && !w.empty(), op, ": x ", x.shape_string(), " w [", w.rows, ", ",
                w.cols, "]");
  require_2d(op, out, "out", x.size(0), w.rows);
  TPLLAMA_CHECK(x.size(1) == w.cols, op, ": x ", x.shape_string(), " vs w [", w.rows, ", ", w.cols,
                "]");
  TPLLAMA_CHECK(w.device == ctx.device, op, ": weight on ", device_name(w.device), ", op on ",
                device_name(ctx.device));
}

}  // namespace

void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w) {
  require_matmul("matmul", ctx, out, x, w);
  if (on_gpu("matmul", ctx, {&out, &x})) TPLLAMA_GPU(matmul(ctx, out, x, w));
  require_cpu_f32("matmul", {&out, &x});
  cpu::gemm(out.as<float>(), x.as<float>(), x.size(0), w.data, w.dtype, w.rows, w.cols,
            ctx.threads);
}

void matmuls(const DeviceContext& ctx, Tensor x, std::initializer_list<MatmulOut> products) {
  TPLLAMA_CHECK(products.size() >= 1 && products.size() <= static_cast<size_t>(cpu::kMaxProducts),
                "matmuls: ", products.size(), " products (1 to ", cpu::kMaxProducts, ")");
  bool gpu = false;
  for (const MatmulOut& p : products) {
    TPLLAMA_CHECK(p.w != nullptr, "matmuls: a product without a weight");
    require_matmul("matmuls", ctx, p.out, x, *p.w);
    gpu = on_gpu("matmuls", ctx,
                 {&p.out, &x});  // every tensor on the op's device, checked before any runs
  }
  if (gpu) {
    for (const MatmulOut& p : products) matmul(ctx, p.out, x, *p.w);
    return;
  }
  cpu::GemmProduct cpu_products[cpu::kMaxProducts];
  int count = 0;
  for (const MatmulOut& p : products) {
    require_cpu_f32("matmuls", {&p.out, &x});
    cpu_products[count++] = {p.out.as<float>(), p.w->data, p.w->dtype, p.w->rows};
  }
  cpu::gemm_multi(x.as<float>(), x.size(0), x.size(1), cpu_products, count, ctx.threads);
}

DType matmul_input_dtype(const DeviceContext& ctx, const Weight& w) {
  if (on_gpu("matmul_input_dtype", ctx, {})) TPLLAMA_GPU(matmul_input_dtype(w));
  return DType::kF32;
}

const char* cpu_gemm_kernel_name() {
  return cpu::gemm_kernel_name();
}

const char* cpu_int8_kernel_name(int64_t m) {
  return cpu::int8_kernel_name(m);
}

int64_t cpu_int8_quantized_rows() {
  return cpu::kInt8QuantizedRows;
}

bool cpu_avx512_kernels() {
  return cpu::avx512_kernels();
}

}  // namespace tpllama::ops
