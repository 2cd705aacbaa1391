// Placement: where a rank computes and how its tensors move (its CPU threads, its device and the
// node's ranks sharing it, the communicator backend, the dtype of its weights and KV cache), chosen
// once on every rank from the layout flags, typed as the CLI parsed them. Session opens what this
// chooses; the choices themselves are pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/dtype.h"
#include "ops/threads.h"
#include "parallel/group_comm.h"
#include "parallel/mpi_session.h"
#include "parallel/topology.h"

namespace tpllama {

enum class DeviceChoice { kAuto, kCpu, kCuda };        // --device
enum class CommChoice { kAuto, kMpi, kNccl };          // --comm
enum class DTypeChoice { kAuto, kF32, kBF16, kInt8 };  // --dtype; --kv-dtype (no int8)

// The layout flags that place a rank.
struct PlacementOptions {
  int threads = 0;                            // 0: cores of the node / ranks on the node
  DeviceChoice device = DeviceChoice::kAuto;  // auto: cuda when built in and a GPU is visible
  CommChoice comm = CommChoice::kAuto;        // auto: nccl on GPUs unless they are shared
  bool share_gpus = false;                    // let several ranks use one GPU (with --comm mpi)
  DTypeChoice dtype = DTypeChoice::kAuto;     // weight matrices (auto: bf16 on a GPU)
};

// The dtype weights are held in on a device (auto: bf16 on a GPU, f32 on the CPU; an int8
// checkpoint int8 on the CPU, bf16 on a GPU).
DType weight_dtype(DTypeChoice dtype, Device device, bool int8_checkpoint);
// The dtype of the KV cache (auto: bf16 on a GPU with bf16 weights, else f32).
DType kv_cache_dtype(DTypeChoice kv_dtype, DType weights, Device device);
// How tensors move (auto: NCCL on GPUs that no two ranks share, else MPI).
CommBackend comm_backend(CommChoice comm, Device device, bool share_gpus);
// The ranks on `rank`'s node whose device has its identity (every rank of the node on the CPU),
// ascending: identities[r] is rank r's device ("cpu", or a GPU's UUID).
std::vector<int> device_sharers(const std::vector<int>& node_of_rank,
                                const std::vector<std::string>& identities, int rank);

// What place_rank chose for this rank.
struct Placement {
  ops::ThreadPlacement threads;
  Device device = Device::kCpu;
  int gpu = -1;                 // the GPU's number in this process (kCuda)
  int sharers = 1;              // ranks of this node on this rank's device (its memory is theirs)
  bool first_on_device = true;  // the lowest of them
  CommBackend comm = CommBackend::kMpi;
  DType dtype = DType::kF32;  // weight matrices
};

// On every rank (collective): pins this rank's threads, chooses its device and finds the ranks
// sharing it, then the backend and the weights' dtype. Fails, with the numbers, on a device that is
// not there, GPUs shared without --share-gpus, NCCL where it cannot run, int8 on a GPU.
Placement place_rank(const MpiSession& mpi, const Topology& topology, const NodeInfo& nodes,
                     const PlacementOptions& options, bool int8_checkpoint);

// Rank 0's log of the layout: ranks per node, and a warning for a TP group that spans nodes
// (unless allowed).
void log_layout(const Topology& topology, const NodeInfo& nodes, bool allow_cross_node_tp);

// This rank and where it runs, for messages about it: "rank 5 (stage 1, tp rank 1) on node07".
std::string describe_rank(const Topology& topology, const NodeInfo& nodes);

}  // namespace tpllama
