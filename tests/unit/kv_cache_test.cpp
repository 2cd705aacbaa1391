// The KV pool on the CPU costs the memory of the blocks written, not of its planned size: a pool
// planned for 64 sequences of a 128k context must not take its gigabytes (or the seconds of
// touching them) at start-up. Resident memory is read from /proc/self/statm.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "model/kv_cache.h"

namespace tpllama {
namespace {

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(KvCachePool, APoolTakesTheMemoryOfTheBlocksWrittenNotOfItsSize) {
  // 4 layers x 2 (K, V) x 8192 blocks of 16 tokens x 256 floats = 1 GiB.
  const int n_layers = 4, kv_dim = 256, block_size = 16, n_blocks = 8192;
  const int64_t before = resident_bytes();
  KvCache cache(n_layers, kv_dim, block_size, n_blocks, 64, DeviceContext{}, n_blocks, DType::kF32);
  ASSERT_EQ(cache.bytes(), uint64_t{1} << 30);
  EXPECT_LT(resident_bytes() - before, 64 * kMiB) << "the pool's pages were taken at start-up";

  // Writing one block of every layer takes about that block's pages, and the pool reads as zeros.
  for (int layer = 0; layer < n_layers; ++layer)
    for (Tensor pool : {cache.key_pool(layer), cache.value_pool(layer)}) {
      float* rows = pool.as<float>() + int64_t{100} * block_size * kv_dim;
      EXPECT_EQ(rows[0], 0.0f);
      std::fill(rows, rows + block_size * kv_dim, 1.0f);
    }
  EXPECT_LT(resident_bytes() - before, 64 * kMiB);
  EXPECT_EQ(cache.key_pool(3).as<float>()[int64_t{101} * block_size * kv_dim], 0.0f);
}

}  // namespace
}  // namespace tpllama
