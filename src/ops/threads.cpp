// The CPU thread pool's placement, asked of ops/cpu.
#include "ops/threads.h"

#include "ops/cpu/threads.h"

namespace tpllama::ops {

ThreadPlacement plan_threads(int requested, int local_rank, int ranks_on_node) {
  return cpu::plan_threads(requested, local_rank, ranks_on_node);
}

void apply_threads(const ThreadPlacement& placement) {
  cpu::apply_threads(placement);
}

bool widen_to_node_share(int local_rank, int ranks_on_node) {
  return cpu::widen_to_node_share(local_rank, ranks_on_node);
}

}  // namespace tpllama::ops
