// cuBLAS, opened when the first GPU needs it rather than linked. Loading libcublasLt at start costs
// every process of a GPU build about 150 MiB of resident memory and 0.4 s, CPU runs and `--help`
// included; opened here, only a rank that uses a GPU pays.
#pragma once

#include <cublas_v2.h>

namespace tpllama::cuda {

// cublasGemmEx as exported (C++ also sees an inline overload taking a cudaDataType compute type).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m,
                                        int n, int k, const void* alpha, const void* a,
                                        cudaDataType a_type, int lda, const void* b,
                                        cudaDataType b_type, int ldb, const void* beta, void* c,
                                        cudaDataType c_type, int ldc, cublasComputeType_t compute,
                                        cublasGemmAlgo_t algo);

// The entry points this project calls, typed by the header's own declarations.
struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  CublasGemmEx gemm_ex = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Opens libcublas.so.<major of the headers built against> once per process: first where the
// dynamic linker looks (LD_LIBRARY_PATH, the binary's run path, the system cache), then beside the
// CUDA runtime this process loaded, then where the build found cuBLAS. Throws naming each path
// tried and the loader's error.
const CublasLibrary& cublas();

// The file name looked for ("libcublas.so.13").
const char* cublas_file_name();

}  // namespace tpllama::cuda
