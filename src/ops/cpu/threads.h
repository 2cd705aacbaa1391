// The rank's CPU thread pool: how many threads, on which cores, pinned one thread per core.
#pragma once

#include <string>
#include <vector>

namespace tpllama::ops::cpu {

struct ThreadPlacement {
  int threads = 1;
  std::vector<int> cpus;  // the core of each thread (empty: not pinned)
  std::string note;       // what was decided and why, for the log ("" when nothing to say)
  bool oversubscribed = false;
};

// requested: --threads (0: the node's cores ÷ its ranks). The rank's cores are its affinity mask
// when that holds enough of them (srun --cpus-per-task, mpirun --map-by slot:PE=n); when the
// launcher bound it to fewer cores than its share (Open MPI binds to one core at np ≤ 2) it takes
// its slice of the node's cores by local rank, so threads never share a core.
ThreadPlacement plan_threads(int requested, int local_rank, int ranks_on_node);
// Sizes the OpenMP pool and pins thread t to cpus[t].
void apply_threads(const ThreadPlacement& placement);

}  // namespace tpllama::ops::cpu
