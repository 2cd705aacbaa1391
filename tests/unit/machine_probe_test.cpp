// bench's probe of the machine (ops::measure_limits) runs on every core of the node, then gives the
// rank's threads back as they were: a run measured after it must not share its cores with what the
// probe left (issue 33: the workload after the probe ran 3-5x slower than without it). Checked on
// what is left, not on time: the OpenMP team's size, each team thread's cores, and no thread of the
// process still running once the probe is over.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ops/roofline.h"
#include "ops/threads.h"

namespace tpllama {
namespace {

std::set<int> cores_of_calling_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> cores;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.insert(c);
  return cores;
}

// The cores of each thread of a team of the current default size.
std::vector<std::set<int>> team_cores() {
  std::vector<std::set<int>> cores(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel
  {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    if (t < cores.size()) cores[t] = cores_of_calling_thread();
  }
  return cores;
}

// Threads of this process other than the caller in state R (running or runnable): a thread left
// spinning by the probe is one.
int other_running_threads() {
  int running = 0;
  const std::string self = std::to_string(gettid());
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    if (task.path().filename() == self) continue;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // "pid (comm) S ...": the state follows the name
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R') ++running;
  }
  return running;
}

void expect_placement_as_planned(const ops::ThreadPlacement& p, const std::string& when) {
  EXPECT_EQ(omp_get_max_threads(), p.threads) << when;
  const std::vector<std::set<int>> cores = team_cores();
  ASSERT_EQ(cores.size(), static_cast<size_t>(p.threads)) << when;
  for (size_t t = 0; t < cores.size(); ++t) {
    if (t < p.cpus.size())
      EXPECT_EQ(cores[t], std::set<int>{p.cpus[t]}) << when << ": thread " << t;
    else
      EXPECT_GT(cores[t].size(), 1u) << when << ": unpinned thread " << t << " is still pinned";
  }
}

void probe_and_check(const ops::ThreadPlacement& p, const std::string& what) {
  ops::apply_threads(p);
  expect_placement_as_planned(p, what + ", before the probe");
  DeviceContext ctx;
  ctx.threads = p.threads;
  const ops::DeviceLimits limits = ops::measure_limits(ctx, DType::kF32, p);
  EXPECT_GT(limits.read_bandwidth, 0) << what;
  EXPECT_GT(limits.gemm_flops, 0) << what;
  EXPECT_EQ(limits.cores, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  expect_placement_as_planned(p, what + ", after the probe");
  // Whatever the probe's threads do once it returns, they have stopped well before a run's first
  // step: nothing of this process but the caller is running.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(other_running_threads(), 0) << what << ": a thread left running after the probe";
}

TEST(MachineProbe, LeavesTheRanksThreadsAsTheyWere) {
  if (std::thread::hardware_concurrency() < 2)
    GTEST_SKIP() << "one core: the probe's team is the rank's own";
  probe_and_check(ops::plan_threads(1, 0, 1), "one thread pinned to the rank's first core");
  ops::ThreadPlacement unpinned;  // as an oversubscribed rank runs
  unpinned.threads = 1;
  probe_and_check(unpinned, "one unpinned thread");
  ops::apply_threads(ops::plan_threads(0, 0, 1));  // the test binary's default again
}

}  // namespace
}  // namespace tpllama
