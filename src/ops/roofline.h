// What a device can do at best, measured: its read bandwidth and its GEMM rate (tpllama bench
// puts each phase against them).
#pragma once

#include "core/device.h"
#include "core/dtype.h"

namespace tpllama::ops {

// The roofline of a device, measured (tpllama bench). Read bandwidth in bytes/s: on the CPU a
// streaming read over 1 GiB on the context's threads; on a GPU a device-to-device copy of 2 GiB,
// counting the bytes read and written. GEMM FLOP/s: the matmul this build runs (the project's
// CPU GEMM: the best of squares of 1024, 1536 and 2048; cuBLAS: 8192) with weights held as dtype.
double measure_read_bandwidth(const DeviceContext& ctx);
double measure_gemm_flops(const DeviceContext& ctx, DType dtype);

}  // namespace tpllama::ops
