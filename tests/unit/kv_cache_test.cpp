// The KV pool on the CPU costs the memory of the blocks written, not of its planned size: a pool
// planned for 64 sequences of a 128k context must not take its gigabytes (or the seconds of
// touching them) at start-up. Resident memory is read from /proc/self/statm.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

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

// The fraction of the pages under [p, p + bytes) that are resident (mincore).
double resident_fraction(const void* p, int64_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page,
                  end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  std::vector<unsigned char> in((end - begin + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) return -1;
  return static_cast<double>(
             std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; })) /
         static_cast<double>(in.size());
}

// A block handed to a slot has its chunk's pages (2 MiB of each pool) supplied at once, in every
// layer's keys and values, not by a fault at each page's first write; chunks not handed out stay
// unmapped, and the pool still reads as zeros.
TEST(KvCachePool, AppendingABlockPopulatesItsChunkInEveryPool) {
  {  // the kernel's MADV_POPULATE_WRITE (Linux 5.14 on): without it the pages come at first write
    void* probe =
        ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool populates = ::madvise(probe, 1 << 16, 23 /* MADV_POPULATE_WRITE */) == 0;
    ::munmap(probe, 1 << 16);
    if (!populates) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14 on)";
  }
  // 4 layers x 2 x 8192 blocks of 16 positions x 256 floats: 16 KiB a block a pool, so 128 blocks
  // (2 MiB) a chunk.
  const int n_layers = 4, kv_dim = 256, block_size = 16, n_blocks = 8192;
  KvCache cache(n_layers, kv_dim, block_size, n_blocks, 4, DeviceContext{}, n_blocks, DType::kF32);
  const int64_t chunk_bytes = int64_t{128} * block_size * kv_dim * 4;
  auto chunk_of = [&](const Tensor& pool, int chunk) {
    return pool.as<float>() + int64_t{chunk} * 128 * block_size * kv_dim;
  };
  for (int layer = 0; layer < n_layers; ++layer)
    EXPECT_LT(resident_fraction(chunk_of(cache.key_pool(layer), 2), chunk_bytes), 0.1);
  const int64_t before = resident_bytes();
  cache.append_block(0, 300);  // in chunk 2 (blocks 256-383)
  for (int layer = 0; layer < n_layers; ++layer)
    for (const Tensor& pool : {cache.key_pool(layer), cache.value_pool(layer)}) {
      EXPECT_EQ(resident_fraction(chunk_of(pool, 2), chunk_bytes), 1.0) << "layer " << layer;
      EXPECT_LT(resident_fraction(chunk_of(pool, 3), chunk_bytes), 0.1) << "layer " << layer;
      EXPECT_EQ(chunk_of(pool, 2)[12345], 0.0f);
    }
  const int64_t grew = resident_bytes() - before;
  EXPECT_GE(grew, 8 * chunk_bytes - kMiB);
  EXPECT_LT(grew, 8 * chunk_bytes + 16 * kMiB);
  cache.append_block(0, 301);  // the same chunk: nothing more
  EXPECT_LT(resident_bytes() - before, 8 * chunk_bytes + 16 * kMiB);
}

}  // namespace
}  // namespace tpllama
