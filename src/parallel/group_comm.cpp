// make_group_communicator: the communicator factory (the only code outside ops/ that knows whether
// CUDA is built in).
#include "parallel/group_comm.h"

#include "core/error.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "parallel/nccl_comm.h"
#endif

namespace tpllama {

CommBackend parse_comm_backend(const std::string& name) {
  if (name == "mpi") return CommBackend::kMpi;
  if (name == "nccl") return CommBackend::kNccl;
  fail("unknown communication backend '", name, "' (mpi or nccl)");
}

std::unique_ptr<Communicator> make_group_communicator(std::unique_ptr<MpiCommunicator> mpi, CommBackend backend,
                                                      const DeviceContext& ctx, const std::string& group) {
  if (backend == CommBackend::kMpi || mpi->size() == 1) {  // a group of one moves nothing: no NCCL to start
    if (ctx.device != Device::kCpu) mpi->stage_through_host(ctx);
    return mpi;
  }
  if (ctx.device != Device::kCuda) fail("--comm nccl needs --device cuda; this run is on ", device_name(ctx.device));
#ifdef TPLLAMA_HAVE_CUDA
  return std::make_unique<NcclCommunicator>(std::move(mpi), ctx, group);
#else
  fail("--comm nccl asked for, but this build has no CUDA (configure with -DTPLLAMA_CUDA=ON where nvcc is installed)");
#endif
}

}  // namespace tpllama
