// The one place that picks how a group's tensors move: MPI (host memory, or device memory staged
// through the host) or NCCL (device memory, on the compute stream); and the communicators a rank
// of a layout holds.
#pragma once

#include <memory>
#include <string>

#include "core/device_context.h"
#include "parallel/communicator.h"
#include "parallel/mpi_session.h"
#include "parallel/topology.h"

namespace tpllama {

class MpiCommunicator;

enum class CommBackend { kMpi, kNccl };

// The communicator for tensors on ctx's device over mpi's group (which it takes over). NCCL needs
// a build with CUDA and a GPU context; MPI with a GPU context stages through host memory. `group`
// names the group in errors ("TP group").
std::unique_ptr<Communicator> make_group_communicator(std::unique_ptr<MpiCommunicator> mpi,
                                                      CommBackend backend, const DeviceContext& ctx,
                                                      const std::string& group);

// A rank's communicators. Declared in the order they are made: whoever holds them destroys the
// stage and TP groups before the world.
struct RankCommunicators {
  std::unique_ptr<Communicator> world;  // the replica's ranks, host memory: plans and tokens
  // With several replicas, the replicas' leaders (rank r: replica r's), host memory: requests out
  // to them and records back (null with one replica).
  std::unique_ptr<Communicator> leaders;
  std::unique_ptr<Communicator> tp;     // this rank's TP group, over `backend`
  std::unique_ptr<Communicator> stage;  // this TP rank through the stages: hidden states
};
// The replica's group (a duplicate of the world with one replica), the leaders' group, then the TP
// and stage groups of `topology` (collective).
RankCommunicators make_rank_communicators(const MpiSession& mpi, const Topology& topology,
                                          CommBackend backend, const DeviceContext& ctx);

}  // namespace tpllama
