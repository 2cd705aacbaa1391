// The rank's CPU thread pool: how many threads, on which cores, pinned one thread per core.
#pragma once

#include <vector>

#include "ops/threads.h"

namespace tpllama::ops::cpu {

using ops::ThreadPlacement;

// A rank's share of its node: the node's cores ÷ its ranks, consecutive cores by local rank.
std::vector<int> node_share(int local_rank, int ranks_on_node);

// requested: --threads (0: the rank's share). The rank's cores are its affinity mask when that
// holds enough of them (srun --cpus-per-task, mpirun --map-by slot:PE=n), else its node share; more
// threads than that run unpinned, with a note saying they will share cores. Throws, naming both
// numbers, when requested exceeds every core the rank may use (its mask or its share, the larger).
ThreadPlacement plan_threads(int requested, int local_rank, int ranks_on_node);
// Sizes the OpenMP pool and pins thread t to cpus[t].
// Unpinned (no cpus), the team's threads may run on every core the process started with.
void apply_threads(const ThreadPlacement& placement);

// Widens the process's affinity mask to its node share when a launcher bound it to fewer cores
// (Open MPI binds to one core at np <= 2). The OpenMP runtime reads the mask once, when it loads,
// so the caller must start the program again after a true return.
bool widen_to_node_share(int local_rank, int ranks_on_node);

}  // namespace tpllama::ops::cpu
