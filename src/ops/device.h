// The device a rank computes on: the runtime that owns its stream and handles, and its memory
// (allocate, zero, upload, download, synchronize, what is free). The CPU is a device like a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device_context.h"
#include "core/tensor.h"

namespace tpllama::ops {

// Whether this build has the GPU path.
bool cuda_built();
// GPUs this process can use (0 in a build without CUDA, or without a driver or device).
int gpu_count();
// GPU `gpu`'s UUID as hex: ranks that see one GPU under different numbers (per-rank
// CUDA_VISIBLE_DEVICES) can tell it from ranks sharing one.
std::string gpu_uuid(int gpu);

// Owns what a rank's DeviceContext points at: on a GPU its stream, cuBLAS handle and scratch.
class DeviceRuntime {
 public:
  // device kCpu: `threads` CPU threads. kCuda: GPU number `gpu` of this process.
  DeviceRuntime(Device device, int gpu, int threads);
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;
  const DeviceContext& context() const { return ctx_; }
  // "cpu (N threads)" or "cuda:G (name, total memory)".
  std::string describe() const;

 private:
  struct Gpu;
  std::unique_ptr<Gpu> gpu_;
  DeviceContext ctx_;
  int gpu_index_ = -1;
};

// Bytes of ctx.scratch the ops need for activations of up to max_rows rows and max_width columns
// (0 on the CPU). A model whose steps are larger than the runtime's scratch brings its own.
size_t scratch_bytes(const DeviceContext& ctx, int64_t max_rows, int64_t max_width);

// Memory on the context's device: aligned host memory on the CPU, cudaMalloc on a GPU (never
// managed memory). Allocated at start-up, never per step.
Buffer allocate(const DeviceContext& ctx, size_t nbytes);
// nbytes of zeroed memory on the context's device. On the CPU the pages are supplied as they are
// first written or populated (the KV pool: a sequence takes the memory of the positions it reaches,
// and a pool sized for 64 sequences of a 128k context starts at once); on a GPU, allocate then
// zero.
Buffer allocate_zeroed(const DeviceContext& ctx, size_t nbytes);
// Every byte of t set to 0, in stream order. On the CPU the rank's threads share the writing.
void zero(const DeviceContext& ctx, Tensor t);
// On the CPU, the pages under t (memory of allocate_zeroed) supplied now, in one call, not a fault
// at each page's first write (cpu::populate); its contents unchanged. On a GPU nothing: its memory
// is there from allocation.
void populate(const DeviceContext& ctx, Tensor t);
// dst (on the context's device) ← dst.nbytes() bytes of host memory, in stream order; host may be
// reused once the call returns.
void upload(const DeviceContext& ctx, Tensor dst, const void* host);
// host ← src.nbytes() bytes of src (on the context's device); returns once they have arrived.
void download(const DeviceContext& ctx, void* host, Tensor src);
// dst ← src (same size, both on the context's device), in stream order.
void copy(const DeviceContext& ctx, Tensor dst, Tensor src);
// Waits until the context's device has finished its queued work (a no-op on the CPU).
void synchronize(const DeviceContext& ctx);
// Bytes free on the context's device: MemAvailable on the CPU (0 when unknown), free device
// memory on a GPU (the start-up memory check and the KV cache size).
uint64_t memory_available(const DeviceContext& ctx);

}  // namespace tpllama::ops
