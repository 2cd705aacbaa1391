// Where a tensor lives and the per-rank execution context that ops run in. The CPU context only
// carries the thread count; the GPU issue adds stream, cuBLAS handle and workspace here.
#pragma once

#include <string>

namespace tpllama {

enum class Device { kCpu, kCuda };

inline std::string device_name(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

struct DeviceContext {
  Device device = Device::kCpu;
  int threads = 1;
};

}  // namespace tpllama
