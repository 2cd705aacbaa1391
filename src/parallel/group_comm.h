// The one place that picks how a group's tensors move: MPI (host memory, or device memory staged
// through the host) or NCCL (device memory, on the compute stream).
#pragma once

#include <memory>
#include <string>

#include "core/device.h"
#include "parallel/mpi_comm.h"

namespace tpllama {

enum class CommBackend { kMpi, kNccl };

// "mpi" / "nccl".
CommBackend parse_comm_backend(const std::string& name);

// The communicator for tensors on ctx's device over mpi's group (which it takes over). NCCL needs
// a build with CUDA and a GPU context; MPI with a GPU context stages through host memory. `group`
// names the group in errors ("TP group").
std::unique_ptr<Communicator> make_group_communicator(std::unique_ptr<MpiCommunicator> mpi, CommBackend backend,
                                                      const DeviceContext& ctx, const std::string& group);

}  // namespace tpllama
