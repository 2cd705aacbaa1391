// StallWatch: a rank that finishes no step for --stall-timeout ends its process with status 75,
// saying what it was doing; steps keep it alive; a timeout of 0 never watches.
#include <chrono>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "core/stop_signal.h"

namespace tpllama {
namespace {

using namespace std::chrono_literals;

class StallWatchDeath : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StallWatchDeath, NoStepForTheTimeoutEndsTheProcessWith75) {
  EXPECT_EXIT(
      {
        StallWatch watch(2.0, "rank 5 (stage 1, tp rank 0) on n1");
        watch.at("waiting for hidden states from the previous stage");
        std::this_thread::sleep_for(20s);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kExitStoppedEarly),
      "rank 5 \\(stage 1, tp rank 0\\) on n1: no pipeline step for 1 s.*the job ends at --stall-timeout 2 s"
      ".*no pipeline step for 2 s \\(0 steps done; now waiting for hidden states from the previous stage\\); "
      "a rank is hung");
}

TEST_F(StallWatchDeath, StepsKeepItAliveAndAStallAfterThemStillEndsIt) {
  EXPECT_EXIT(
      {
        StallWatch watch(1.0, "rank 0");
        for (int i = 0; i < 150; ++i) {  // 3 s of steps, each well within the timeout
          watch.step_done();
          std::this_thread::sleep_for(20ms);
        }
        std::this_thread::sleep_for(20s);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kExitStoppedEarly), "no pipeline step for 1 s \\(150 steps done");
}

TEST_F(StallWatchDeath, StepsWithinTheTimeoutNeverEndIt) {
  EXPECT_EXIT(
      {
        StallWatch watch(1.0, "rank 0");
        for (int i = 0; i < 150; ++i) {
          watch.step_done();
          std::this_thread::sleep_for(20ms);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StallWatchDeath, ZeroNeverWatches) {
  EXPECT_EXIT(
      {
        StallWatch watch(0, "rank 0");
        std::this_thread::sleep_for(1500ms);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tpllama
