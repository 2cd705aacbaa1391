// A rank's CPU threads as the layers above ops/ see them: how many, on which cores, and why; the
// pool itself is ops/cpu/threads.h's.
#pragma once

#include <string>
#include <vector>

namespace tpllama::ops {

struct ThreadPlacement {
  int threads = 1;
  std::vector<int> cpus;  // the core of each thread (empty: not pinned)
  std::string note;       // what was decided and why, for the log ("" when nothing to say)
  bool oversubscribed = false;
};

// requested: --threads (0: the rank's share of its node's cores); ops/cpu/threads.h's plan_threads,
// which throws, naming both numbers, when requested exceeds every core the rank may use.
ThreadPlacement plan_threads(int requested, int local_rank, int ranks_on_node);
// Sizes the CPU thread pool and pins thread t to cpus[t].
void apply_threads(const ThreadPlacement& placement);
// Widens the process's affinity mask to its node share when a launcher bound it to fewer cores;
// true means the caller must start the program again (ops/cpu/threads.h says why).
bool widen_to_node_share(int local_rank, int ranks_on_node);

}  // namespace tpllama::ops
