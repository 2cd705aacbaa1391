// A rank's threads, device, backend and dtypes, chosen and checked against the node's other ranks.
#include "session/placement.h"

#include "core/error.h"
#include "core/log.h"
#include "ops/device.h"

namespace tpllama {
namespace {

void warn_cross_node_tp(const Topology& t, const NodeInfo& nodes) {
  for (int group = 0; group < t.dp_size() * t.pp_size(); ++group) {
    const int stage = group % t.pp_size();
    const int first = group * t.tp_size();
    bool spans = false;
    std::string members;
    for (int r = first; r < first + t.tp_size(); ++r) {
      spans = spans || nodes.node_of_rank[static_cast<size_t>(r)] !=
                           nodes.node_of_rank[static_cast<size_t>(first)];
      members += (r == first ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " +
                 nodes.host_of_rank[static_cast<size_t>(r)];
    }
    if (spans)
      log::warn("the TP group of stage " + std::to_string(stage) +
                (t.dp_size() > 1 ? " of replica " + std::to_string(t.replica_of(first)) : "") +
                " spans nodes (" + members +
                "): its all-reduces cross the network. Place consecutive ranks on one node "
                "(mpirun --map-by slot) or pass --allow-cross-node-tp to silence this");
  }
}

// The threads: planned, pinned, and the plan's note logged (a warning when cores are shared).
ops::ThreadPlacement place_threads(int requested, const NodeInfo& nodes, int rank) {
  ops::ThreadPlacement threads =
      ops::plan_threads(requested, nodes.local_rank, nodes.ranks_on_node);
  ops::apply_threads(threads);
  if (threads.oversubscribed)
    log::warn("rank " + std::to_string(rank) + ": " + threads.note);
  else if (!threads.note.empty() && rank == 0)
    log::info(threads.note);
  return threads;
}

}  // namespace

DType weight_dtype(DTypeChoice dtype, Device device, bool int8_checkpoint) {
  if (dtype == DTypeChoice::kAuto)
    return device != Device::kCpu ? DType::kBF16 : int8_checkpoint ? DType::kI8 : DType::kF32;
  if (dtype == DTypeChoice::kInt8) return DType::kI8;
  return dtype == DTypeChoice::kBF16 ? DType::kBF16 : DType::kF32;
}

DType kv_cache_dtype(DTypeChoice kv_dtype, DType weights, Device device) {
  if (kv_dtype == DTypeChoice::kAuto)
    return device != Device::kCpu && weights == DType::kBF16 ? DType::kBF16 : DType::kF32;
  return kv_dtype == DTypeChoice::kBF16 ? DType::kBF16 : DType::kF32;
}

CommBackend comm_backend(CommChoice comm, Device device, bool share_gpus) {
  if (comm == CommChoice::kAuto)
    return device == Device::kCuda && !share_gpus ? CommBackend::kNccl : CommBackend::kMpi;
  return comm == CommChoice::kNccl ? CommBackend::kNccl : CommBackend::kMpi;
}

std::vector<int> device_sharers(const std::vector<int>& node_of_rank,
                                const std::vector<std::string>& identities, int rank) {
  std::vector<int> sharers;
  const auto me = static_cast<size_t>(rank);
  for (size_t r = 0; r < identities.size(); ++r)
    if (node_of_rank[r] == node_of_rank[me] && identities[r] == identities[me])
      sharers.push_back(static_cast<int>(r));
  return sharers;
}

Placement place_rank(const MpiSession& mpi, const Topology& topology, const NodeInfo& nodes,
                     const PlacementOptions& o, bool int8_checkpoint) {
  Placement p;
  const int me = topology.rank();
  p.threads = place_threads(o.threads, nodes, me);
  const std::string& host = nodes.host_of_rank[static_cast<size_t>(me)];
  int gpus = 0;
  std::string identity = "cpu";
  collective_phase([&] {
    gpus = ops::gpu_count();
    if (o.device == DeviceChoice::kCuda && gpus == 0)
      fail("--device cuda, but rank ", me, " on ", host, " sees no GPU (",
           ops::cuda_built()
               ? "check CUDA_VISIBLE_DEVICES and the job's GPU allocation"
               : "this build has no CUDA: configure with -DTPLLAMA_CUDA=ON where nvcc is installed",
           "), or run with --device cpu");
    if (o.device == DeviceChoice::kCuda || (o.device == DeviceChoice::kAuto && gpus > 0))
      p.device = Device::kCuda;
    if (p.device == Device::kCpu && o.comm == CommChoice::kNccl)
      fail("--comm nccl needs GPUs; this run is on the CPU");
    if (p.device == Device::kCuda) {
      p.gpu = nodes.local_rank % gpus;
      identity = ops::gpu_uuid(p.gpu);
    }
  });
  const std::vector<int> sharers =
      device_sharers(nodes.node_of_rank, mpi.all_gather_text(identity), me);
  p.sharers = static_cast<int>(sharers.size());
  p.first_on_device = sharers.front() == me;
  collective_phase([&] {
    if (p.device == Device::kCuda && sharers.size() > 1) {
      std::string list;
      for (int r : sharers) list += (list.empty() ? "" : ", ") + std::to_string(r);
      if (!o.share_gpus)
        fail("ranks ", list, " on ", host, " would share GPU ", p.gpu, " (", nodes.ranks_on_node,
             " ranks on the node, ", gpus,
             " GPUs visible): start one rank per GPU, or pass --share-gpus --comm mpi to let them "
             "share");
      if (o.comm == CommChoice::kNccl)
        fail("ranks ", list, " share one GPU, which NCCL cannot do: use --comm mpi");
    }
    p.comm = comm_backend(o.comm, p.device, o.share_gpus);
    p.dtype = weight_dtype(o.dtype, p.device, int8_checkpoint);
    if (p.dtype == DType::kI8 && p.device != Device::kCpu)
      fail(
          "--dtype int8 runs on the CPU only: there are no GPU kernels for int8 weights yet. "
          "On a GPU use --dtype bf16 (or auto",
          int8_checkpoint ? ", which holds this int8 checkpoint's weights as bf16" : "",
          "), or run on the CPU with --device cpu");
    if (int8_checkpoint && p.dtype != DType::kI8 && me == 0)
      log::info("the int8 checkpoint's matrices are held as " + std::string(dtype_name(p.dtype)) +
                ", q x scale" +
                (p.device != Device::kCpu ? ": there are no GPU kernels for int8 yet" : ""));
  });
  return p;
}

namespace {

// "host (ranks a-b)" per run of ranks [begin, end) on one node, from the ranks' own processor
// names.
std::string hosts_of(const NodeInfo& nodes, int begin, int end) {
  std::string hosts;
  for (int r = begin; r < end;) {
    int last = r;
    while (last + 1 < end && nodes.node_of_rank[static_cast<size_t>(last + 1)] ==
                                 nodes.node_of_rank[static_cast<size_t>(r)])
      ++last;
    if (!hosts.empty()) hosts += ", ";
    hosts.append(nodes.host_of_rank[static_cast<size_t>(r)])
        .append(" (ranks ")
        .append(std::to_string(r));
    if (last > r) hosts.append("-").append(std::to_string(last));
    hosts += ")";
    r = last + 1;
  }
  return hosts;
}

}  // namespace

void log_layout(const Topology& t, const NodeInfo& nodes, bool allow_cross_node_tp) {
  const std::string dp =
      t.dp_size() > 1 ? "dp " + std::to_string(t.dp_size()) + " x " : std::string();
  log::info("layout: " + std::to_string(t.world_size()) + " ranks = " + dp + "tp " +
            std::to_string(t.tp_size()) + " x pp " + std::to_string(t.pp_size()) + " on " +
            std::to_string(nodes.n_nodes) + " node(s): " + hosts_of(nodes, 0, t.world_size()));
  if (t.dp_size() > 1)
    for (int replica = 0; replica < t.dp_size(); ++replica) {
      const int first = replica * t.replica_size();
      log::info("  replica " + std::to_string(replica) + " (leader rank " + std::to_string(first) +
                "): " + hosts_of(nodes, first, first + t.replica_size()));
    }
  if (!allow_cross_node_tp) warn_cross_node_tp(t, nodes);
}

std::string describe_rank(const Topology& t, const NodeInfo& nodes) {
  return "rank " + std::to_string(t.rank()) + " (" +
         (t.dp_size() > 1 ? "replica " + std::to_string(t.replica()) + ", " : std::string()) +
         "stage " + std::to_string(t.pp_rank()) + ", tp rank " + std::to_string(t.tp_rank()) +
         ") on " + nodes.host_of_rank[static_cast<size_t>(t.rank())];
}

}  // namespace tpllama
