// Thread placement (see threads.h).
#include "ops/cpu/threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace tpllama::ops::cpu {
namespace {

int node_cores() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The process's affinity mask when it started, before anything pinned a thread: where an unpinned
// placement's threads may run.
const cpu_set_t& start_mask() {
  static const cpu_set_t mask = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
      for (int c = 0; c < node_cores(); ++c) CPU_SET(c, &set);
    return set;
  }();
  return mask;
}
// Taken when the library loads, so it is the mask of the program's start.
[[maybe_unused]] const bool g_start_mask_taken = (start_mask(), true);

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(cpus[i]);
  }
  return out;
}

}  // namespace

std::vector<int> node_share(int local_rank, int ranks_on_node) {
  const int share = std::max(1, node_cores() / std::max(1, ranks_on_node));
  std::vector<int> cpus;
  for (int t = 0; t < share; ++t) cpus.push_back((local_rank * share + t) % node_cores());
  return cpus;
}

ThreadPlacement plan_threads(int requested, int local_rank, int ranks_on_node) {
  const std::vector<int> share = node_share(local_rank, ranks_on_node);
  const std::vector<int> mask = affinity_cpus();
  // The cores this rank may run on: its affinity mask, or its node share when it would be widened
  // to that. Threads past the share but within the mask share cores with other ranks (run, with a
  // note); threads past every core it may use cannot make it faster and, by the thousand, break the
  // OpenMP runtime (100000 crashed zeroing the KV pool), so they are refused.
  const size_t may_use = std::max(mask.size(), share.size());
  if (requested > 0 && static_cast<size_t>(requested) > may_use)
    fail("--threads ", requested, " is more than the ", may_use, " cores this rank may use (",
         cpu_list(mask.size() >= share.size() ? mask : share), "); give at most --threads ",
         may_use, " or leave it out (default: the rank's share of its node, ", share.size(), ")");
  ThreadPlacement p;
  p.threads = requested > 0 ? requested : static_cast<int>(share.size());
  const bool launcher_bound = mask.size() < static_cast<size_t>(node_cores());
  const bool use_mask = launcher_bound && mask.size() >= static_cast<size_t>(p.threads);
  const std::vector<int>& cores = use_mask ? mask : share;
  if (static_cast<size_t>(p.threads) > cores.size()) {
    p.oversubscribed = true;
    p.note = std::to_string(p.threads) + " threads for the " + std::to_string(cores.size()) +
             " core(s) of this rank (" + cpu_list(cores) +
             "): threads will share cores and run slower";
    return p;
  }
  p.cpus.assign(cores.begin(), cores.begin() + p.threads);
  if (launcher_bound && !use_mask)
    p.note = "the launcher bound this rank to cores " + cpu_list(mask) + "; using cores " +
             cpu_list(p.cpus) + " (its share of the node) for " + std::to_string(p.threads) +
             " threads (launch with --bind-to none or --map-by slot:PE=n to choose)";
  return p;
}

void apply_threads(const ThreadPlacement& placement) {
  omp_set_num_threads(placement.threads);
  // Every thread of the team, pinned to its core; or, unpinned, free on the cores the process
  // started with again (a thread pinned before, by a probe over the node, is let go).
#pragma omp parallel num_threads(placement.threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    cpu_set_t set = start_mask();
    if (t < placement.cpus.size()) {
      CPU_ZERO(&set);
      CPU_SET(placement.cpus[t], &set);
    }
    sched_setaffinity(0, sizeof set, &set);  // 0: the calling thread; a refusal leaves it as it is
  }
}

bool widen_to_node_share(int local_rank, int ranks_on_node) {
  const std::vector<int> share = node_share(local_rank, ranks_on_node);
  if (share.size() < 2 || local_rank >= ranks_on_node || affinity_cpus().size() >= share.size())
    return false;
  cpu_set_t wide;
  CPU_ZERO(&wide);
  for (int c : share) CPU_SET(c, &wide);
  return sched_setaffinity(0, sizeof wide, &wide) ==
         0;  // a cgroup may forbid it: then keep the binding
}

}  // namespace tpllama::ops::cpu
