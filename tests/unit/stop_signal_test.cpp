// Stop signals: one stop relayed twice (Slurm, then srun / mpirun) counts once, a later one is a
// second; and the start-up note on what Open MPI's mpirun does with SIGTERM / SIGINT.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/stop_signal.h"

namespace tpllama {
namespace {

// Each case installs the handlers in a forked child (a death test), so the parent's signal state
// and the process-wide counters stay untouched.
class StopSignalDeath : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The child's exit status: 10 x signals counted + 1 when stop_signal() names the latest one.
[[noreturn]] void exit_with_count(int latest) {
  std::_Exit(10 * stop_signals_received() + (stop_signal() == latest ? 1 : 0));
}

TEST_F(StopSignalDeath, OneStopRelayedTwiceWithinTheWindowCountsOnce) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        ::kill(::getpid(), SIGTERM);  // from Slurm
        ::kill(::getpid(), SIGTERM);  // and again from mpirun / srun, milliseconds later
        exit_with_count(SIGTERM);
      },
      ::testing::ExitedWithCode(11), "");
}

TEST_F(StopSignalDeath, ADifferentSignalWithinTheWindowIsStillTheSameStop) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        ::kill(::getpid(), SIGINT);   // Ctrl-C
        ::kill(::getpid(), SIGTERM);  // what a launcher makes of it
        exit_with_count(SIGTERM);
      },
      ::testing::ExitedWithCode(11), "");
}

TEST_F(StopSignalDeath, ASignalAfterTheWindowIsASecondStop) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        ::kill(::getpid(), SIGUSR1);
        std::this_thread::sleep_for(std::chrono::duration<double>(kRelayWindowSeconds + 0.2));
        ::kill(::getpid(), SIGINT);
        exit_with_count(SIGINT);
      },
      ::testing::ExitedWithCode(21), "");
}

// A stand-in environment for mpirun_stop_note.
std::function<const char*(const char*)> environment(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

const std::string kHnp = "OMPI_MCA_orte_hnp_uri", kTimeout = "OMPI_MCA_odls_base_sigkill_timeout";

TEST(MpirunStopNote, NothingOutsideMpirun) {
  EXPECT_EQ(mpirun_stop_note(environment({})), "");
  EXPECT_EQ(mpirun_stop_note(environment({{kTimeout, "1"}})), "")
      << "srun or a single process: no mpirun";
}

// Open MPI 4.1's default odls_base_sigkill_timeout is 1 s (ompi_info --all).
TEST(MpirunStopNote, UnderMpirunItSaysWhatSigtermDoesAndToSendUsr1) {
  const std::string note = mpirun_stop_note(environment({{kHnp, "1.0;tcp://10.0.0.1:4000"}}));
  EXPECT_NE(note.find("a SIGTERM or Ctrl-C to mpirun does not give the graceful stop"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("SIGKILL 1 s later"), std::string::npos) << note;
  EXPECT_NE(note.find("kill -USR1"), std::string::npos) << note;
  const std::string longer = mpirun_stop_note(environment({{kHnp, "x"}, {kTimeout, "30"}}));
  EXPECT_NE(longer.find("SIGKILL 30 s later"), std::string::npos) << longer;
}

}  // namespace
}  // namespace tpllama
