// Measuring the machine's limits for bench, on the first rank of each device.
#include "app/bench_limits.h"

#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "ops/roofline.h"

namespace tpllama {

// A run's work spreads over every device (a decode step's bytes are every rank's matrices): the
// limits are their sums.
MachineLimits measure_limits(const MpiSession& mpi, const Session& s) {
  const DeviceContext ctx = s.device_context();
  std::vector<double> mine = {0, 0, 0, 0, 0};  // bandwidth, GEMM FLOP/s, devices, stream, weights
  int cores = 0;
  if (s.first_on_device()) {
    try {  // after a run, memory may be short: then the report has no roofline, the run's figures
      const ops::DeviceLimits measured =
          ops::measure_limits(ctx, s.dtype(), s.thread_placement(), s.weight_buffers());
      cores = measured.cores;
      mine = {measured.read_bandwidth, measured.gemm_flops, 1, measured.stream_bandwidth,
              measured.resident_read};
    } catch (const Error& e) {
      log::warn(std::string("the machine's limits were not measured: ") + e.what());
    }
  }
  mpi.quiet_barrier();
  const std::vector<double> sum = mpi.sum_to_root(mine);
  MachineLimits m;
  if (sum.empty()) return m;  // not rank 0
  m.read_bandwidth = sum[0];
  m.gemm_flops = sum[1];
  m.devices = static_cast<int>(sum[2]);
  m.stream_bandwidth = sum[3];
  m.weights_read = sum[4];
  const std::string n = std::to_string(m.devices);
  if (ctx.device != Device::kCpu)
    m.where = m.devices == 1 ? "1 GPU" : n + " GPUs";
  else
    m.where = m.devices == 1 ? std::to_string(cores) + " cores of 1 node"
                             : "all cores of " + n + " nodes";
  return m;
}

}  // namespace tpllama
