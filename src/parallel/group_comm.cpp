// make_group_communicator, make_rank_communicators: the communicator factory (the only code
// outside ops/ that knows whether CUDA is built in).
#include "parallel/group_comm.h"

#include "core/error.h"
#include "parallel/mpi_comm.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "parallel/nccl_comm.h"
#endif

namespace tpllama {

std::unique_ptr<Communicator> make_group_communicator(std::unique_ptr<MpiCommunicator> mpi,
                                                      CommBackend backend, const DeviceContext& ctx,
                                                      const std::string& group) {
  if (backend == CommBackend::kMpi ||
      mpi->size() == 1) {  // a group of one moves nothing: no NCCL to start
    if (ctx.device != Device::kCpu) mpi->stage_through_host(ctx);
    return mpi;
  }
  if (ctx.device != Device::kCuda)
    fail("--comm nccl needs --device cuda; this run is on ", device_name(ctx.device));
#ifdef TPLLAMA_HAVE_CUDA
  return std::make_unique<NcclCommunicator>(std::move(mpi), ctx, group);
#else
  fail(
      "--comm nccl asked for, but this build has no CUDA (configure with -DTPLLAMA_CUDA=ON where "
      "nvcc is installed)");
#endif
}

RankCommunicators make_rank_communicators(const MpiSession& mpi, const Topology& topology,
                                          CommBackend backend, const DeviceContext& ctx) {
  RankCommunicators c;
  const Topology& t = topology;
  if (t.dp_size() == 1) {
    c.world = mpi.duplicate_world();
  } else {
    c.world = mpi.split(t.replica(), t.replica_rank());
    // Every rank takes part in the split; only the leaders' group is used.
    c.leaders = mpi.split(t.is_replica_leader() ? 0 : 1, t.replica());
  }
  c.tp = make_group_communicator(mpi.split(t.replica() * t.pp_size() + t.pp_rank(), t.tp_rank()),
                                 backend, ctx, "TP group");
  c.stage = make_group_communicator(mpi.split(t.replica() * t.tp_size() + t.tp_rank(), t.pp_rank()),
                                    backend, ctx, "stage group");
  return c;
}

}  // namespace tpllama
