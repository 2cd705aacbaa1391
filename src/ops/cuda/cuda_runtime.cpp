// CudaRuntime and DeviceBuffer (see cuda_runtime.h).
#include "ops/cuda/cuda_runtime.h"

#include <cstdio>
#include <utility>

#include "ops/cuda/cuda_check.h"

namespace tpllama::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_uuid(int device) {
  cudaDeviceProp prop{};
  TPLLAMA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::string hex;
  char digits[3];
  for (char byte : prop.uuid.bytes) {
    std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned char>(byte));
    hex += digits;
  }
  return hex;
}

CudaRuntime::CudaRuntime(int device, size_t scratch_bytes)
    : device_(device), scratch_bytes_(scratch_bytes) {
  const int n = device_count();
  if (device < 0 || device >= n)
    fail("GPU ", device, " asked for, but this process sees ", n, " GPU(s)");
  TPLLAMA_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  TPLLAMA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = stream;
  cublasHandle_t blas = nullptr;
  TPLLAMA_CUBLAS_CHECK(cublas().create(&blas));
  blas_ = blas;
  TPLLAMA_CUBLAS_CHECK(cublas().set_stream(blas, stream));
  // cuBLAS's own workspace, set once: nothing is allocated while a CUDA graph is being recorded.
  TPLLAMA_CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes));
  TPLLAMA_CUBLAS_CHECK(cublas().set_workspace(blas, blas_workspace_, kBlasWorkspaceBytes));
  TPLLAMA_CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes_));
}

CudaRuntime::~CudaRuntime() {
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (blas_ != nullptr) cublas().destroy(static_cast<cublasHandle_t>(blas_));
  if (blas_workspace_ != nullptr) cudaFree(blas_workspace_);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

DeviceContext CudaRuntime::context() const {
  DeviceContext ctx;
  ctx.device = Device::kCuda;
  ctx.stream = stream_;
  ctx.blas = blas_;
  ctx.scratch = scratch_;
  ctx.scratch_bytes = scratch_bytes_;
  return ctx;
}

std::string CudaRuntime::describe() const {
  cudaDeviceProp prop{};
  TPLLAMA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  char text[320];
  std::snprintf(text, sizeof text, "%s, %.1f GiB, compute capability %d.%d", prop.name,
                static_cast<double>(prop.totalGlobalMem) / (1u << 30), prop.major, prop.minor);
  return text;
}

void CudaRuntime::synchronize() const {
  TPLLAMA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

DeviceBuffer::DeviceBuffer(size_t nbytes) : nbytes_(nbytes) {
  TPLLAMA_CUDA_CHECK(cudaMalloc(&data_, nbytes == 0 ? 1 : nbytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), nbytes_(std::exchange(other.nbytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    nbytes_ = std::exchange(other.nbytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t nbytes, size_t offset) {
  TPLLAMA_CHECK(offset + nbytes <= nbytes_, "upload of ", nbytes, " bytes at ", offset, " into ",
                nbytes_);
  TPLLAMA_CUDA_CHECK(
      cudaMemcpy(static_cast<char*>(data_) + offset, host, nbytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the bytes land, and the ops' non-blocking
  // streams do not wait for the legacy stream: finish the copy before anyone reads it.
  TPLLAMA_CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceBuffer::download(void* host, size_t nbytes, size_t offset) const {
  TPLLAMA_CHECK(offset + nbytes <= nbytes_, "download of ", nbytes, " bytes at ", offset, " from ",
                nbytes_);
  TPLLAMA_CUDA_CHECK(cudaDeviceSynchronize());  // every stream's writes to it are done
  TPLLAMA_CUDA_CHECK(
      cudaMemcpy(host, static_cast<const char*>(data_) + offset, nbytes, cudaMemcpyDeviceToHost));
}

bool is_device_pointer(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice;
}

}  // namespace tpllama::cuda
