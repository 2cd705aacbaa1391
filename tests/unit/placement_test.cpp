// The placement choices as pure functions (no MPI, no GPU): the dtypes auto resolves to, the
// backend, and which ranks share a device. Expected values are the flags' documented rules.
#include "session/placement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpllama {
namespace {

TEST(PlacementWeightDType, AutoIsF32OnTheCpuAndBf16OnAGpu) {
  EXPECT_EQ(weight_dtype(DTypeChoice::kAuto, Device::kCpu, false), DType::kF32);
  EXPECT_EQ(weight_dtype(DTypeChoice::kAuto, Device::kCuda, false), DType::kBF16);
}

TEST(PlacementWeightDType, AutoKeepsAnInt8CheckpointInt8OnlyOnTheCpu) {
  EXPECT_EQ(weight_dtype(DTypeChoice::kAuto, Device::kCpu, true), DType::kI8);
  EXPECT_EQ(weight_dtype(DTypeChoice::kAuto, Device::kCuda, true), DType::kBF16);
}

TEST(PlacementWeightDType, AnExplicitChoiceIsTakenAsGiven) {
  EXPECT_EQ(weight_dtype(DTypeChoice::kF32, Device::kCuda, true), DType::kF32);
  EXPECT_EQ(weight_dtype(DTypeChoice::kBF16, Device::kCpu, true), DType::kBF16);
  EXPECT_EQ(weight_dtype(DTypeChoice::kInt8, Device::kCpu, false), DType::kI8);
}

TEST(PlacementKvDType, AutoIsBf16OnlyOnAGpuWithBf16Weights) {
  EXPECT_EQ(kv_cache_dtype(DTypeChoice::kAuto, DType::kBF16, Device::kCuda), DType::kBF16);
  EXPECT_EQ(kv_cache_dtype(DTypeChoice::kAuto, DType::kF32, Device::kCuda), DType::kF32);
  EXPECT_EQ(kv_cache_dtype(DTypeChoice::kAuto, DType::kBF16, Device::kCpu), DType::kF32);
  EXPECT_EQ(kv_cache_dtype(DTypeChoice::kBF16, DType::kF32, Device::kCpu), DType::kBF16);
  EXPECT_EQ(kv_cache_dtype(DTypeChoice::kF32, DType::kBF16, Device::kCuda), DType::kF32);
}

TEST(PlacementCommBackend, AutoIsNcclOnlyOnGpusNoRanksShare) {
  EXPECT_EQ(comm_backend(CommChoice::kAuto, Device::kCuda, false), CommBackend::kNccl);
  EXPECT_EQ(comm_backend(CommChoice::kAuto, Device::kCuda, true), CommBackend::kMpi);
  EXPECT_EQ(comm_backend(CommChoice::kAuto, Device::kCpu, false), CommBackend::kMpi);
  EXPECT_EQ(comm_backend(CommChoice::kMpi, Device::kCuda, false), CommBackend::kMpi);
  EXPECT_EQ(comm_backend(CommChoice::kNccl, Device::kCuda, false), CommBackend::kNccl);
}

TEST(PlacementDeviceSharers, AreTheRanksOfTheNodeWithTheSameDevice) {
  // Two nodes: ranks 0-3 on node 0 over GPUs a and b in turn; ranks 4 and 5 on node 1, both on a
  // GPU whose identity repeats node 0's (identities are compared within a node only).
  const std::vector<int> node_of_rank = {0, 0, 0, 0, 1, 1};
  const std::vector<std::string> identities = {"a", "b", "a", "b", "a", "a"};
  EXPECT_EQ(device_sharers(node_of_rank, identities, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(device_sharers(node_of_rank, identities, 3), (std::vector<int>{1, 3}));
  EXPECT_EQ(device_sharers(node_of_rank, identities, 5), (std::vector<int>{4, 5}));
}

TEST(PlacementDeviceSharers, OnTheCpuAreTheWholeNode) {
  const std::vector<int> node_of_rank = {0, 0, 1};
  const std::vector<std::string> identities = {"cpu", "cpu", "cpu"};
  EXPECT_EQ(device_sharers(node_of_rank, identities, 1), (std::vector<int>{0, 1}));
  EXPECT_EQ(device_sharers(node_of_rank, identities, 2), (std::vector<int>{2}));
}

}  // namespace
}  // namespace tpllama
