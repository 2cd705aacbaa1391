// StallWatch: a rank that, after its first step, finishes no step for --stall-timeout ends its
// process with status 75, saying who it is and what it was doing; steps keep it alive; nothing
// before the first step, after stop() or while the process is stopped counts; 0 never watches.
#include <signal.h>
#include <unistd.h>

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

// Steps every 20 ms for 3 s: each well within a timeout of 1 s.
void steps_for_three_seconds(StallWatch& watch) {
  for (int i = 0; i < 150; ++i) {
    watch.step_done();
    std::this_thread::sleep_for(20ms);
  }
}

TEST_F(StallWatchDeath, NoStepForTheTimeoutEndsTheProcessWith75) {
  EXPECT_EXIT(
      {
        StallWatch watch(2.0, "rank 5 (stage 1, tp rank 0) on n1", "--resume continues");
        watch.step_done();
        watch.at("waiting for hidden states from the previous stage");
        std::this_thread::sleep_for(20s);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kExitStoppedEarly),
      "rank 5 \\(stage 1, tp rank 0\\) on n1: no pipeline step for 1\\.[0-9] s.*the job ends at "
      "--stall-timeout 2 s"
      ".*no pipeline step for 2\\.[0-9] s \\(1 steps done; now waiting for hidden states from the "
      "previous stage\\); "
      "a rank is hung.*\\(exit status 75; --resume continues\\)");
}

TEST_F(StallWatchDeath, NothingBeforeTheFirstStepIsWatched) {
  EXPECT_EXIT(
      {
        StallWatch watch(1.0, "rank 0", "");
        std::this_thread::sleep_for(3s);  // loading, rank 0 reading past what --resume skips
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StallWatchDeath, StepsKeepItAliveAndAStallAfterThemStillEndsIt) {
  EXPECT_EXIT(
      {
        StallWatch watch(1.0, "rank 0", "");
        steps_for_three_seconds(watch);
        std::this_thread::sleep_for(20s);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kExitStoppedEarly),
      "no pipeline step for 1\\.[0-9] s \\(150 steps done");
}

TEST_F(StallWatchDeath, StepsWithinTheTimeoutNeverEndItNorDoesTheTimeAfterStop) {
  EXPECT_EXIT(
      {
        StallWatch watch(1.0, "rank 0", "");
        steps_for_three_seconds(watch);
        watch.stop();
        std::this_thread::sleep_for(3s);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StallWatchDeath, ADestroyedWatchEndsNothing) {
  EXPECT_EXIT(
      {
        {
          StallWatch watch(1.0, "rank 0", "");
          watch.step_done();
        }
        std::this_thread::sleep_for(3s);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StallWatchDeath, ZeroNeverWatches) {
  EXPECT_EXIT(
      {
        StallWatch watch(0, "rank 0", "");
        watch.step_done();
        std::this_thread::sleep_for(1500ms);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A suspended job (SIGSTOP, then SIGCONT: Slurm's suspend, gang scheduling) is not a stall: 6 s
// stopped (a tick over 5 s late is a pause), past a timeout of 2 s, and then a step within the
// timeout, end nothing.
TEST_F(StallWatchDeath, TimeTheProcessIsStoppedDoesNotCount) {
  EXPECT_EXIT(
      {
        StallWatch watch(2.0, "rank 0", "");
        watch.step_done();
        const pid_t self = ::getpid();
        if (::fork() == 0) {  // wakes this process in 6 s
          ::sleep(6);
          ::kill(self, SIGCONT);
          std::_Exit(0);
        }
        ::raise(SIGSTOP);
        std::this_thread::sleep_for(500ms);
        watch.step_done();
        std::this_thread::sleep_for(500ms);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tpllama
