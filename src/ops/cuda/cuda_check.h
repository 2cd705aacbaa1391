// Every CUDA and cuBLAS call is checked: a failure throws naming the call and the error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

#define TPLLAMA_CUDA_CHECK(call)                                                                   \
  do {                                                                                             \
    const cudaError_t tpllama_status_ = (call);                                                    \
    if (tpllama_status_ != cudaSuccess)                                                            \
      ::tpllama::fail(#call, " failed: ", cudaGetErrorName(tpllama_status_), " (",                 \
                      cudaGetErrorString(tpllama_status_), ")");                                   \
  } while (0)

#define TPLLAMA_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                             \
    const cublasStatus_t tpllama_status_ = (call);                                                 \
    if (tpllama_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::tpllama::fail(#call, " failed: ", cublasGetStatusName(tpllama_status_), " (",              \
                      cublasGetStatusString(tpllama_status_), ")");                                \
  } while (0)
