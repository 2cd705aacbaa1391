// Every CUDA and cuBLAS call is checked: a failure throws naming the call and the error. cuBLAS
// is reached through cublas() (opened on first use, see cublas_library.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "ops/cuda/cublas_library.h"

#define TPLLAMA_CUDA_CHECK(call)                                                   \
  do {                                                                             \
    const cudaError_t tpllama_status_ = (call);                                    \
    if (tpllama_status_ != cudaSuccess)                                            \
      ::tpllama::fail(#call, " failed: ", cudaGetErrorName(tpllama_status_), " (", \
                      cudaGetErrorString(tpllama_status_), ")");                   \
  } while (0)

#define TPLLAMA_CUBLAS_CHECK(call)                                                          \
  do {                                                                                      \
    const cublasStatus_t tpllama_status_ = (call);                                          \
    if (tpllama_status_ != CUBLAS_STATUS_SUCCESS) {                                         \
      const ::tpllama::cuda::CublasLibrary& tpllama_blas_ = ::tpllama::cuda::cublas();      \
      ::tpllama::fail(#call, " failed: ", tpllama_blas_.status_name(tpllama_status_), " (", \
                      tpllama_blas_.status_string(tpllama_status_), ")");                   \
    }                                                                                       \
  } while (0)
