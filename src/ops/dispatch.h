// What every op does before it runs (ops/*.cpp only): check shapes and dtypes, and decide where it
// runs — on the GPU when the context is one (then every tensor must live there; a build without
// CUDA names the op), else on the CPU, whose activations are f32.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/device_context.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tpllama::ops::check {

inline void require_f32(const char* op, const Tensor& t, const char* what) {
  TPLLAMA_CHECK(t.dtype() == DType::kF32, op, ": ", what, " must be f32, got ",
                dtype_name(t.dtype()));
}

inline void require_2d(const char* op, const Tensor& t, const char* what, int64_t rows,
                       int64_t cols) {
  TPLLAMA_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, op, ": ", what,
                " has shape ", t.shape_string(), ", expected [", rows, ", ", cols, "]");
}

// True when the op runs on the GPU; then every tensor must live there too.
inline bool on_gpu(const char* op, const DeviceContext& ctx,
                   std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    TPLLAMA_CHECK(t->device() == ctx.device, op, ": a tensor on ", device_name(t->device()),
                  " given to an op on ", device_name(ctx.device));
  if (ctx.device == Device::kCpu) return false;
#ifndef TPLLAMA_HAVE_CUDA
  fail("op ", op, " was asked to run on ", device_name(ctx.device),
       " but this build has no CUDA (configure with -DTPLLAMA_CUDA=ON where nvcc is installed)");
#endif
  return true;
}

// A layer's key and value pools: one dtype, f32 or bf16.
inline void require_kv_pools(const char* op, const Tensor& keys, const Tensor& values) {
  TPLLAMA_CHECK((keys.dtype() == DType::kF32 || keys.dtype() == DType::kBF16) &&
                    values.dtype() == keys.dtype(),
                op, ": KV pools of ", dtype_name(keys.dtype()), " and ",
                dtype_name(values.dtype()));
}

// The activations of a CPU op are f32.
inline void require_cpu_f32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) require_f32(op, *t, "an activation on the CPU");
}

}  // namespace tpllama::ops::check

// Returns the GPU op's result from an op whose on_gpu() said so (unreachable in a CPU-only build).
#ifdef TPLLAMA_HAVE_CUDA
#define TPLLAMA_GPU(call) return cuda::call
#else
#define TPLLAMA_GPU(call) fail("unreachable: no CUDA in this build")
#endif
