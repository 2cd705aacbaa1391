// Where a tensor lives and the per-rank execution context that ops run in: the CPU thread count,
// and on a GPU the stream, cuBLAS handle and a scratch area (owned by ops/cuda's CudaRuntime; kept
// opaque here so nothing above ops/ needs CUDA headers).
#pragma once

#include <cstddef>
#include <string>

namespace tpllama {

enum class Device { kCpu, kCuda };

inline std::string device_name(Device d) {
  return d == Device::kCpu ? "cpu" : "cuda";
}

struct DeviceContext {
  Device device = Device::kCpu;
  int threads = 1;
  void* stream = nullptr;  // cudaStream_t
  void* blas = nullptr;    // cublasHandle_t
  void* scratch =
      nullptr;  // device memory for an op's temporaries (converted inputs, block tables)
  size_t scratch_bytes = 0;
};

}  // namespace tpllama
