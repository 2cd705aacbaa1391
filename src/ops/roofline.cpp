// Measuring a device's read bandwidth and GEMM rate.
#include "ops/roofline.h"

#include <algorithm>
#include <cstdint>
#include <thread>

#include "ops/cpu/machine_limits.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

double measure_read_bandwidth(const DeviceContext& ctx) {
  if (on_gpu("measure_read_bandwidth", ctx, {}))
    TPLLAMA_GPU(measure_copy_bandwidth(ctx, size_t{2} << 30));
  return cpu::measure_read_bandwidth(ctx.threads, size_t{1} << 30);
}

double measure_gemm_flops(const DeviceContext& ctx, DType dtype) {
  if (on_gpu("measure_gemm_flops", ctx, {})) TPLLAMA_GPU(measure_gemm_flops(ctx, dtype, 8192));
  // The best over three large squares: at 2048 the operands (16 MiB each in f32) outgrow the caches
  // and the GEMM runs 6-9% below its rate at 1024-1536, which a model's own products then beat.
  double best = 0;
  for (int64_t n : {1024, 1536, 2048})
    best = std::max(best, cpu::measure_gemm_flops(ctx.threads, dtype, n));
  return best;
}

DeviceLimits measure_limits(const DeviceContext& ctx, DType dtype,
                            const ThreadPlacement& rank_threads,
                            const std::vector<const Buffer*>& resident) {
  DeviceLimits limits;
  DeviceContext measured = ctx;
  if (ctx.device == Device::kCpu) {
    limits.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    ThreadPlacement all;
    all.threads = limits.cores;
    for (int c = 0; c < limits.cores; ++c) all.cpus.push_back(c);
    apply_threads(all);
    measured.threads = limits.cores;
  }
  try {
    limits.stream_bandwidth = measure_read_bandwidth(measured);
    std::vector<cpu::ByteSpan> spans;
    if (ctx.device == Device::kCpu)
      for (const Buffer* b : resident)
        if (b != nullptr && b->device() == Device::kCpu && b->nbytes() > 0)
          spans.push_back({b->data(), b->nbytes()});
    if (!spans.empty()) limits.resident_read = cpu::measure_read_rate(measured.threads, spans);
    limits.gemm_flops = measure_gemm_flops(measured, dtype);
    // The weights read again, a second later: a shared machine's read rate moves 2x within seconds
    // (35-81 GB/s across one afternoon's probes here), and one window can miss its fast phases.
    if (!spans.empty())
      limits.resident_read =
          std::max(limits.resident_read, cpu::measure_read_rate(measured.threads, spans));
    limits.read_bandwidth = std::max(limits.stream_bandwidth, limits.resident_read);
  } catch (...) {
    if (ctx.device == Device::kCpu) apply_threads(rank_threads);
    throw;
  }
  if (ctx.device == Device::kCpu) apply_threads(rank_threads);
  return limits;
}

}  // namespace tpllama::ops
