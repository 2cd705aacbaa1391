// Thread placement (see threads.h).
#include "ops/cpu/threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace tpllama::ops::cpu {
namespace {

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(cpus[i]);
  }
  return out;
}

}  // namespace

ThreadPlacement plan_threads(int requested, int local_rank, int ranks_on_node) {
  const int node_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int ranks = std::max(1, ranks_on_node);
  const int share = std::max(1, node_cores / ranks);
  ThreadPlacement p;
  p.threads = requested > 0 ? requested : share;
  const std::vector<int> mask = affinity_cpus();
  if (static_cast<int>(mask.size()) >= node_cores && node_cores >= ranks) {
    // Unbound: the rank's slice of the node, by local rank.
    for (int t = 0; t < p.threads; ++t) p.cpus.push_back((local_rank * share + t % share) % node_cores);
  } else if (static_cast<int>(mask.size()) >= p.threads) {
    // Bound by the launcher to enough cores: those.
    p.cpus.assign(mask.begin(), mask.begin() + p.threads);
  } else if (requested == 0 && static_cast<int>(mask.size()) < share && node_cores >= ranks) {
    // Bound to fewer cores than the rank's share (mpirun's bind-to-core at np <= 2): take the share.
    for (int t = 0; t < p.threads; ++t) p.cpus.push_back(local_rank * share + t);
    p.note = "the launcher bound this rank to cores " + cpu_list(mask) + "; using cores " + cpu_list(p.cpus) +
             " (its share of the node) for " + std::to_string(p.threads) +
             " threads (launch with --bind-to none or --map-by slot:PE=n to choose)";
  } else {
    // Asked for more threads than the rank's cores: run them, unpinned, and say so.
    p.oversubscribed = true;
    p.note = std::to_string(p.threads) + " threads on " + std::to_string(mask.size()) +
             " core(s) bound to this rank (" + cpu_list(mask) + "): threads will share cores and run slower";
  }
  if (requested > 0 && static_cast<long long>(requested) * ranks > node_cores) {
    p.oversubscribed = true;
    p.note = std::to_string(requested) + " threads x " + std::to_string(ranks) + " ranks on a node of " +
             std::to_string(node_cores) + " cores: threads will share cores and run slower";
    p.cpus.clear();
  }
  return p;
}

void apply_threads(const ThreadPlacement& placement) {
  omp_set_num_threads(placement.threads);
  if (placement.cpus.empty()) return;
#pragma omp parallel num_threads(placement.threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    if (t < placement.cpus.size()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(placement.cpus[t], &set);
      sched_setaffinity(0, sizeof set, &set);  // 0: the calling thread; a refusal leaves it unpinned
    }
  }
}

}  // namespace tpllama::ops::cpu
