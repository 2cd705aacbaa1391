// The GPU side of a rank: which device, its stream, cuBLAS handle and scratch memory, and device
// buffers. Everything is allocated here once, with cudaMalloc (never managed memory). Compiled
// only when the build has CUDA (TPLLAMA_HAVE_CUDA).
#pragma once

#include <cstddef>
#include <string>

#include "core/device_context.h"

namespace tpllama::cuda {

// GPUs visible to this process (0 when there is no driver or no device).
int device_count();
// The UUID of GPU `device`, as 32 hex digits.
std::string device_uuid(int device);

class CudaRuntime {
 public:
  // Selects `device`, creates the stream and cuBLAS handle, allocates scratch_bytes of scratch.
  CudaRuntime(int device, size_t scratch_bytes = size_t{64} << 20);
  ~CudaRuntime();
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  DeviceContext context() const;
  void synchronize() const;
  int device() const { return device_; }
  // "NVIDIA H200, 139.8 GiB".
  std::string describe() const;

 private:
  int device_;
  void* stream_ = nullptr;
  void* blas_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_;
  static constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
  void* blas_workspace_ = nullptr;
};

// Device memory with one owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t nbytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  void upload(const void* host, size_t nbytes, size_t offset = 0);
  void download(void* host, size_t nbytes, size_t offset = 0) const;

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
};

// Whether ptr is device memory (the parity tests' proof that the candidate ran on the GPU).
bool is_device_pointer(const void* ptr);

}  // namespace tpllama::cuda
