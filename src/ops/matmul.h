// Matrix products with packed weights: out = x · wᵀ, one or several of one x.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/device_context.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/weight.h"

namespace tpllama::ops {

// out (M, N) = x (M, K) · wᵀ.
void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w);
// Several products of one x (the Q, K and V projections; gate and up): outs[i] = x · ws[i]ᵀ, as
// matmul each. On the CPU one pass over the threads takes all of them (one hand-off, not one per
// product); on a GPU, one GEMM each.
struct MatmulOut {
  Tensor out;
  const Weight* w;
};
void matmuls(const DeviceContext& ctx, Tensor x, std::initializer_list<MatmulOut> products);
// The dtype of x that matmul with w reads as it is (f32 on the CPU; the weight's on a GPU, whose
// GEMM takes both inputs alike): an op that writes a GEMM's input writes it in this dtype, and
// no conversion runs in between.
DType matmul_input_dtype(const DeviceContext& ctx, const Weight& w);

// The CPU's matrix kernels, as the load line names them (ops/cpu/gemm.h chooses them at run time):
// the f32 and bf16 GEMM's ("avx512" or "portable"), and the int8 kernel for m rows of x. From
// cpu_int8_quantized_rows() rows on, int8 products quantize x too. cpu_avx512_kernels(): whether
// the AVX-512 kernels run (without them int8 is several times slower than f32).
const char* cpu_gemm_kernel_name();
const char* cpu_int8_kernel_name(int64_t m);
int64_t cpu_int8_quantized_rows();
bool cpu_avx512_kernels();

}  // namespace tpllama::ops
