// The weights' checks before and after a rank loads its shard.
#include "session/weight_audit.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/device.h"

namespace tpllama {

void check_weights_placeable(const LlamaConfig& config, const Topology& topology,
                             const DeviceContext& ctx, DType dtype, int sharers) {
  if (dtype == DType::kI8 && config.int8_group_size > 0)
    check_int8_slices(config, topology, "this int8 checkpoint",
                      "run it with --dtype bf16 or f32, which hold its matrices as q x scale");
  else if (dtype == DType::kI8)
    check_int8_slices(config, topology);
  const uint64_t bytes = held_weight_bytes(config, topology, ctx, dtype);
  const uint64_t available =
      ops::memory_available(ctx) / static_cast<uint64_t>(std::max(1, sharers));
  const bool cpu = ctx.device == Device::kCpu;
  if (available > 0 && bytes > available)
    fail("rank ", topology.rank(), " would hold ", mib(static_cast<double>(bytes)), " of weights (",
         dtype_name(dtype), " matrices on the ", cpu ? "CPU" : "GPU", ") but has ",
         mib(static_cast<double>(available)), " of free ", cpu ? "host" : "GPU", " memory (",
         sharers,
         " ranks share it): spread the model over more ranks (--tp/--pp) or nodes, hold it as "
         "--dtype bf16, or use a device with more memory");
}

void audit_weights(const MpiSession& mpi, const Topology& t, const ModelWeights& w, uint64_t total,
                   bool from_checkpoint) {
  const uint64_t mine[4] = {w.bytes_read, w.bytes_held, w.elements_unique, w.elements_replicated};
  const bool rank0 = t.rank() == 0;
  std::vector<uint64_t> all(rank0 ? 4 * static_cast<size_t>(t.world_size()) : 0);
  mpi.gather_to_root(mine, sizeof mine, all.data());
  if (!rank0) return;
  uint64_t unique = 0, replicated = 0;
  for (int r = 0; r < t.world_size(); ++r) {
    const uint64_t* v = all.data() + 4 * r;
    std::ostringstream os;
    os << "rank " << r << " ("
       << (t.dp_size() > 1 ? "replica " + std::to_string(t.replica_of(r)) + ", " : "") << "tp "
       << t.tp_rank_of(r) << ", pp " << t.pp_rank_of(r) << ", layers ["
       << t.stage_layers(t.pp_rank_of(r)).begin << ", " << t.stage_layers(t.pp_rank_of(r)).end
       << ")): read " << mib(static_cast<double>(v[0])) << ", holds "
       << mib(static_cast<double>(v[1]));
    if (t.world_size() > 1) log::info(os.str());
    if (t.replica_of(r) != 0) continue;  // every replica holds what the first one does
    unique += v[2];
    replicated += v[3];
  }
  std::ostringstream os;
  os << "weights: " << (from_checkpoint ? "checkpoint " : "model (random) ") << total
     << " elements; held once over " << (t.dp_size() > 1 ? "each replica's ranks " : "all ranks ")
     << unique << (unique == total ? " (all of them)" : " (MISMATCH)") << ", plus " << replicated
     << " replicated (norms on every TP rank, shared kv heads, tied embedding on two stages)";
  log::info(os.str());
  TPLLAMA_CHECK(unique == total, "sharded load holds ", unique, " of ", total, " elements");
}

}  // namespace tpllama
