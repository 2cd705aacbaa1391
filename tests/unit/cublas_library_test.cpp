// A build with the GPU path opens cuBLAS only when a GPU needs it: a process that runs ops on the
// CPU has no libcublas mapped, and cublas() then opens it (no GPU is needed for that) with every
// entry point resolved. Built only with the CUDA path.
#include <gtest/gtest.h>

#ifdef TPLLAMA_HAVE_CUDA
#include <fstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/cuda/cublas_library.h"
#include "ops/device.h"
#include "ops/matmul.h"
#include "ops/weight.h"

namespace tpllama {
namespace {

// Whether a file whose path contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLibrary, OpensOnFirstUseNotAtStart) {
  const ops::DeviceRuntime cpu(Device::kCpu, 0, 1);
  std::vector<float> w = {1, 2, 3, 4, 5, 6}, x = {1, 1, 1}, out(2, 0.0f);
  Buffer packed(ops::weight_bytes(cpu.context(), 2, 3, DType::kF32));
  const ops::Weight weight = ops::pack_weight(cpu.context(), Tensor(w.data(), DType::kF32, {2, 3}),
                                              DType::kF32, packed.data());
  ops::matmul(cpu.context(), Tensor(out.data(), DType::kF32, {1, 2}),
              Tensor(x.data(), DType::kF32, {1, 3}), weight);
  EXPECT_EQ(out, (std::vector<float>{6, 15}));
  ASSERT_TRUE(mapped("libc.so")) << "cannot read /proc/self/maps";
  EXPECT_FALSE(mapped("libcublas")) << "a CPU run of the GPU build has cuBLAS loaded";

  const cuda::CublasLibrary& lib = cuda::cublas();
  EXPECT_TRUE(mapped(cuda::cublas_file_name()))
      << cuda::cublas_file_name() << " not mapped after cublas()";
  EXPECT_NE(lib.create, nullptr);
  EXPECT_NE(lib.destroy, nullptr);
  EXPECT_NE(lib.set_stream, nullptr);
  EXPECT_NE(lib.set_workspace, nullptr);
  EXPECT_NE(lib.gemm_ex, nullptr);
  // A call through the table reaches the library: it names its own status codes.
  EXPECT_STREQ(lib.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_NE(std::string(lib.status_string(CUBLAS_STATUS_INVALID_VALUE)), "");
  EXPECT_EQ(&cuda::cublas(), &lib) << "opened twice";
}

}  // namespace
}  // namespace tpllama
#endif
