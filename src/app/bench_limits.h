// The machine's limits that `tpllama bench` puts a run against: read bandwidth and GEMM peak, each
// measured by the first rank on every device and summed over the run's devices.
#pragma once

#include <string>

#include "parallel/mpi_session.h"
#include "session/session.h"

namespace tpllama {

struct MachineLimits {
  double read_bandwidth = 0;    // bytes/s, summed over the devices of the run: the larger of
  double stream_bandwidth = 0;  // a stream far beyond the caches
  double weights_read = 0;      // and (CPU) reading the measuring ranks' own weights
  double gemm_flops = 0;        // FLOP/s of this build's GEMM in the run's dtype, summed likewise
  int devices = 0;              // nodes (CPU) or GPUs measured; 0: not measured
  std::string where;            // what was measured
};

// The first rank on each device measures it (on the CPU every core of its node; on a GPU the GPU)
// while the others wait without spinning; rank 0 gets the sums (elsewhere: nothing measured).
MachineLimits measure_limits(const MpiSession& mpi, const Session& s);

}  // namespace tpllama
