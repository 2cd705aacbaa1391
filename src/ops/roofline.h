// What a device can do at best, measured: its read bandwidth and its GEMM rate (tpllama bench
// puts each phase against them).
#pragma once

#include <vector>

#include "core/device_context.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/threads.h"

namespace tpllama::ops {

// The roofline of a device, measured (tpllama bench). Read bandwidth in bytes/s: on the CPU a
// streaming read over 1 GiB on the context's threads; on a GPU a device-to-device copy of 2 GiB,
// counting the bytes read and written. GEMM FLOP/s: the matmul this build runs (the project's
// CPU GEMM: the best of squares of 1024, 1536 and 2048; cuBLAS: 8192) with weights held as dtype.
double measure_read_bandwidth(const DeviceContext& ctx);
double measure_gemm_flops(const DeviceContext& ctx, DType dtype);

struct DeviceLimits {
  double read_bandwidth = 0;    // bytes/s: the larger of the two below
  double stream_bandwidth = 0;  // bytes/s over a buffer far beyond the caches
  double resident_read = 0;     // bytes/s over `resident` (CPU; 0 when none was given)
  double gemm_flops = 0;        // FLOP/s
  int cores = 0;                // CPU: the cores measured (0 on a GPU)
};
// Both, measured where the rank's run cannot feel it afterwards. On the CPU: on every core of the
// node, one pinned thread a core; then the rank's own threads are placed as rank_threads says
// again (their count, their cores), so nothing of the probe is left: no wider OpenMP team, no
// thread pinned elsewhere, no thread running. `resident`: host buffers a decode step reads (the
// rank's weights), whose read rate also bounds the bandwidth: a step reading them must never beat
// its limit, even where the caches hold part of them.
DeviceLimits measure_limits(const DeviceContext& ctx, DType dtype,
                            const ThreadPlacement& rank_threads,
                            const std::vector<const Buffer*>& resident = {});

}  // namespace tpllama::ops
