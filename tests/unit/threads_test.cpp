// Thread placement bounds: --threads past every core a rank may use is refused with both numbers
// (100000 threads crashed the OpenMP runtime), while up to those cores is planned.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/error.h"
#include "ops/cpu/threads.h"

namespace tpllama::ops::cpu {
namespace {

TEST(Threads, FarMoreThanTheCoresIsRefusedWithBothNumbers) {
  try {
    plan_threads(100000, 0, 1);
    ADD_FAILURE() << "--threads 100000 was planned";
  } catch (const Error& e) {
    const std::string err = e.what();
    EXPECT_NE(err.find("--threads 100000 is more than the "), std::string::npos) << err;
    EXPECT_NE(err.find("cores this rank may use"), std::string::npos) << err;
  }
}

TEST(Threads, OneMoreThanTheNodeIsRefused) {
  const int node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_THROW(plan_threads(node + 1, 0, 1), Error);
}

TEST(Threads, OneThreadIsPlanned) {
  const ThreadPlacement p = plan_threads(1, 0, 1);
  EXPECT_EQ(p.threads, 1);
}

}  // namespace
}  // namespace tpllama::ops::cpu
