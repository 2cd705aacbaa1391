// The device runtime and its memory: validate, then run on the CPU or the GPU.
#include "ops/device.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "ops/cpu/memory.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_runtime.h"
#endif

namespace tpllama::ops {

using namespace check;

bool cuda_built() {
#ifdef TPLLAMA_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int gpu_count() {
#ifdef TPLLAMA_HAVE_CUDA
  return tpllama::cuda::device_count();
#else
  return 0;
#endif
}

std::string gpu_uuid(int gpu) {
#ifdef TPLLAMA_HAVE_CUDA
  return tpllama::cuda::device_uuid(gpu);
#else
  fail("GPU ", gpu, " asked for, but this build has no CUDA");
#endif
}

#ifdef TPLLAMA_HAVE_CUDA
struct DeviceRuntime::Gpu {
  tpllama::cuda::CudaRuntime runtime;
  explicit Gpu(int gpu) : runtime(gpu) {}
};
#else
struct DeviceRuntime::Gpu {};
#endif

DeviceRuntime::DeviceRuntime(Device device, int gpu, int threads) {
  ctx_.device = device;
  ctx_.threads = std::max(1, threads);
  if (device == Device::kCpu) return;
  on_gpu("DeviceRuntime", ctx_, {});  // names the missing CUDA in a CPU-only build
#ifdef TPLLAMA_HAVE_CUDA
  gpu_ = std::make_unique<Gpu>(gpu);
  ctx_ = gpu_->runtime.context();
  ctx_.threads = std::max(1, threads);
  gpu_index_ = gpu;
#endif
}

DeviceRuntime::~DeviceRuntime() = default;

std::string DeviceRuntime::describe() const {
  if (ctx_.device == Device::kCpu) return "cpu (" + std::to_string(ctx_.threads) + " threads)";
#ifdef TPLLAMA_HAVE_CUDA
  return "cuda:" + std::to_string(gpu_index_) + " (" + gpu_->runtime.describe() + ")";
#else
  return "cuda";
#endif
}

size_t scratch_bytes(const DeviceContext& ctx, int64_t max_rows, int64_t max_width) {
  if (on_gpu("scratch_bytes", ctx, {})) TPLLAMA_GPU(scratch_bytes(max_rows, max_width));
  return 0;
}

Buffer allocate(const DeviceContext& ctx, size_t nbytes) {
  if (on_gpu("allocate", ctx, {})) TPLLAMA_GPU(allocate(nbytes));
  // Weights and activations of a few MiB and up on huge pages (cpu::map_pages says why); the
  // memory is reserved now, as malloc's would be.
  if (nbytes >= cpu::kHugePageBytes)
    return Buffer(cpu::map_pages(nbytes, /*reserve=*/true), nbytes, Device::kCpu, cpu::unmap_pages);
  return Buffer(nbytes);
}

Buffer allocate_zeroed(const DeviceContext& ctx, size_t nbytes) {
  if (on_gpu("allocate_zeroed", ctx, {})) {
    Buffer b = allocate(ctx, nbytes);
    zero(ctx, b.view(DType::kI8, {static_cast<int64_t>(nbytes)}));
    return b;
  }
  return Buffer(cpu::map_pages(nbytes, /*reserve=*/false), nbytes, Device::kCpu, cpu::unmap_pages);
}

void populate(const DeviceContext& ctx, Tensor t) {
  if (ctx.device != Device::kCpu) return;
  cpu::populate(t.data(), t.nbytes());
}

void zero(const DeviceContext& ctx, Tensor t) {
  if (on_gpu("zero", ctx, {&t})) TPLLAMA_GPU(zero(ctx, t));
  cpu::zero(t.data(), t.nbytes(), ctx.threads);
}

void upload(const DeviceContext& ctx, Tensor dst, const void* host) {
  if (on_gpu("upload", ctx, {&dst})) TPLLAMA_GPU(upload(ctx, dst, host));
  if (dst.data() != host) std::memcpy(dst.data(), host, dst.nbytes());
}

void download(const DeviceContext& ctx, void* host, Tensor src) {
  if (on_gpu("download", ctx, {&src})) TPLLAMA_GPU(download(ctx, host, src));
  if (src.data() != host) std::memcpy(host, src.data(), src.nbytes());
}

void copy(const DeviceContext& ctx, Tensor dst, Tensor src) {
  TPLLAMA_CHECK(dst.nbytes() == src.nbytes(), "copy of ", src.nbytes(), " bytes into ",
                dst.nbytes());
  if (on_gpu("copy", ctx, {&dst, &src})) TPLLAMA_GPU(copy(ctx, dst, src));
  std::memcpy(dst.data(), src.data(), dst.nbytes());
}

void synchronize(const DeviceContext& ctx) {
  if (on_gpu("synchronize", ctx, {})) TPLLAMA_GPU(synchronize(ctx));
}

uint64_t memory_available(const DeviceContext& ctx) {
  if (on_gpu("memory_available", ctx, {})) TPLLAMA_GPU(memory_available(ctx));
  return cpu::memory_available();
}

}  // namespace tpllama::ops
