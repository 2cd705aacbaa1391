// WorkerPool: every item of every run done exactly once, in parallel where threads are asked
// for, an item's exception rethrown to the caller once the run is over, and the pool still whole
// for the next run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/worker_pool.h"

namespace tpllama {
namespace {

TEST(WorkerPool, EveryItemOfEveryRunIsDoneOnce) {
  WorkerPool pool(3);
  for (size_t threads : {0, 1, 2, 4, 8}) {
    for (size_t n : {1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> done(n);
      pool.run(n, threads, [&](size_t i) { ++done[i]; });
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(done[i].load(), 1)
            << "item " << i << " of " << n << ", " << threads << " threads";
    }
  }
}

// Two items that each wait for the other to start can finish only on two threads at once.
TEST(WorkerPool, ItemsRunOnSeveralThreadsAtOnce) {
  WorkerPool pool(1);
  ASSERT_EQ(pool.workers(), 1u);
  std::atomic<int> started{0};
  std::atomic<bool> met{true};
  pool.run(2, 2, [&](size_t) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2)
      if (std::chrono::steady_clock::now() > deadline) {
        met = false;
        return;
      }
  });
  EXPECT_TRUE(met) << "the second item never ran beside the first";
}

TEST(WorkerPool, AnItemsExceptionReachesTheCallerAfterTheRun) {
  WorkerPool pool(2);
  std::atomic<int> done{0};
  EXPECT_THROW(pool.run(50, 3,
                        [&](size_t i) {
                          ++done;
                          if (i == 7) throw std::runtime_error("item 7");
                        }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 50) << "the other items ran all the same";
  std::vector<std::atomic<int>> again(20);
  pool.run(20, 3, [&](size_t i) { ++again[i]; });
  for (auto& d : again) EXPECT_EQ(d.load(), 1) << "the pool is whole after a failed run";
}

}  // namespace
}  // namespace tpllama
