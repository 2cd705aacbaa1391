// NCCL collectives on the compute stream. Their statistics count the host time to enqueue them
// (they run asynchronously on the GPU); the GPU time shows in the step time around them.
#include "parallel/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"

#define TPLLAMA_NCCL_CHECK(call)                                                \
  do {                                                                          \
    const ncclResult_t tpllama_status_ = (call);                                \
    if (tpllama_status_ != ncclSuccess)                                         \
      ::tpllama::fail(#call, " failed: ", ncclGetErrorString(tpllama_status_)); \
  } while (0)

namespace tpllama {
namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kI32:
      return ncclInt32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI8:
      return ncclInt8;
  }
  fail("NCCL has no type for ", dtype_name(d));
}

ncclComm_t handle(void* comm) {
  return static_cast<ncclComm_t>(comm);
}
cudaStream_t stream_of(const DeviceContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

// How often the watchdog asks NCCL for an asynchronous error: a failed link ends the job within
// about this long, at the cost of one cheap query per interval.
constexpr auto kWatchInterval = std::chrono::milliseconds(200);

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, const DeviceContext& ctx,
                                   std::string group)
    : mpi_(std::move(mpi)), ctx_(ctx), group_(std::move(group)) {
  TPLLAMA_CHECK(ctx.device == Device::kCuda, "NCCL needs a CUDA device context");
  ncclUniqueId id{};
  if (mpi_->rank() == 0) TPLLAMA_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(&id),
                             reinterpret_cast<const uint8_t*>(&id) + sizeof id);
  mpi_->broadcast_bytes(bytes, 0);
  TPLLAMA_CHECK(bytes.size() == sizeof id, "NCCL id of ", bytes.size(), " bytes");
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<uint8_t*>(&id));
  ncclComm_t comm = nullptr;
  TPLLAMA_NCCL_CHECK(ncclCommInitRank(&comm, mpi_->size(), id, mpi_->rank()));
  comm_ = comm;
  try {
    int device = 0;
    TPLLAMA_NCCL_CHECK(ncclCommCuDevice(comm, &device));
    watchdog_ = std::thread(&NcclCommunicator::watch, this, device);
  } catch (...) {
    ncclCommDestroy(comm);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> hold(stop_);
    stopping_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
  if (comm_ != nullptr) ncclCommDestroy(handle(comm_));
}

// On an error the rank ends itself, here, rather than failing the way every other error does
// (an exception that main reports before MPI_Abort): the rank's thread may be waiting on the GPU
// for a collective that will never finish, or in an MPI call on a peer that is, and MPI may not
// be called from this thread (MPI_THREAD_FUNNELED). Aborting the communicator instead would not
// return while recorded CUDA graphs still hold it. A rank that exits non-zero makes mpirun (and
// srun --kill-on-bad-exit) end the job.
void NcclCommunicator::watch(int device) {
  cudaSetDevice(device);  // the current device is per thread: the communicator's GPU
  std::unique_lock<std::mutex> hold(stop_);
  while (!wake_.wait_for(hold, kWatchInterval, [this] { return stopping_; })) {
    // Skipped while the rank's thread is inside NCCL (an enqueue, or a first connection to peers).
    std::unique_lock<std::mutex> in_nccl(nccl_, std::try_to_lock);
    if (!in_nccl.owns_lock()) continue;
    ncclResult_t async = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(handle(comm_), &async);
    const ncclResult_t error = query != ncclSuccess ? query : async;
    if (error == ncclSuccess || error == ncclInProgress) continue;
    log::error("NCCL reported an asynchronous error on this rank's " + group_ + ": " +
               ncclGetErrorString(error) + " (" + ncclGetLastError(handle(comm_)) +
               "); ending the rank so the launcher ends the job");
    std::fflush(stderr);
    std::_Exit(1);
  }
}

bool NcclCommunicator::on_device(const Tensor& t) const {
  if (t.device() == Device::kCpu) return false;
  TPLLAMA_CHECK(t.device() == ctx_.device, "NCCL communicator given a ", device_name(t.device()),
                " tensor");
  return true;
}

class NcclCommunicator::ViaMpi {
 public:
  explicit ViaMpi(NcclCommunicator& c) : c_(c), before_(c.mpi_->stats()) {}
  ~ViaMpi() {
    const CommStats& now = c_.mpi_->stats();
    CommStats& s = c_.stats_;
    s.collective_seconds += now.collective_seconds - before_.collective_seconds;
    s.collective_calls += now.collective_calls - before_.collective_calls;
    s.p2p_seconds += now.p2p_seconds - before_.p2p_seconds;
    s.p2p_calls += now.p2p_calls - before_.p2p_calls;
    s.all_reduce_seconds += now.all_reduce_seconds - before_.all_reduce_seconds;
    s.all_reduce_bytes += now.all_reduce_bytes - before_.all_reduce_bytes;
    s.all_reduce_calls += now.all_reduce_calls - before_.all_reduce_calls;
  }
  ViaMpi(const ViaMpi&) = delete;
  ViaMpi& operator=(const ViaMpi&) = delete;
  MpiCommunicator& operator*() { return *c_.mpi_; }

 private:
  NcclCommunicator& c_;
  CommStats before_;
};

void NcclCommunicator::set_trace(TraceRecorder* trace) {
  trace_ = trace;
  mpi_->set_trace(trace);
}

void NcclCommunicator::all_reduce_sum(Tensor t) {
  if (size() == 1) return;
  if (!on_device(t)) return (*ViaMpi(*this)).all_reduce_sum(t);
  const auto start = std::chrono::steady_clock::now();
  {
    CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_,
                    "all-reduce (nccl)", TraceTrack::kCollective);
    std::lock_guard<std::mutex> hold(nccl_);
    TPLLAMA_NCCL_CHECK(ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()),
                                     nccl_type(t.dtype()), ncclSum, handle(comm_),
                                     stream_of(ctx_)));
  }
  stats_.all_reduce_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.all_reduce_bytes += static_cast<double>(t.nbytes());
  ++stats_.all_reduce_calls;
}

void NcclCommunicator::all_gather(Tensor in, Tensor out) {
  TPLLAMA_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype(), "all_gather ",
                in.shape_string(), " into ", out.shape_string());
  if (!on_device(in) || !on_device(out)) {
    TPLLAMA_CHECK(in.device() == out.device(), "all_gather between ", device_name(in.device()),
                  " and ", device_name(out.device()));
    return (*ViaMpi(*this)).all_gather(in, out);
  }
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "all-gather (nccl)",
                  TraceTrack::kCollective);
  std::lock_guard<std::mutex> hold(nccl_);
  TPLLAMA_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()),
                                   nccl_type(in.dtype()), handle(comm_), stream_of(ctx_)));
}

void NcclCommunicator::broadcast(Tensor t, int root) {
  if (size() == 1) return;
  if (!on_device(t)) return (*ViaMpi(*this)).broadcast(t, root);
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "broadcast (nccl)",
                  TraceTrack::kCollective);
  std::lock_guard<std::mutex> hold(nccl_);
  TPLLAMA_NCCL_CHECK(ncclBroadcast(t.data(), t.data(), static_cast<size_t>(t.numel()),
                                   nccl_type(t.dtype()), root, handle(comm_), stream_of(ctx_)));
}

void NcclCommunicator::send(Tensor t, int dest, int tag) {
  if (!on_device(t)) return (*ViaMpi(*this)).send(t, dest, tag);
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "send (nccl)", TraceTrack::kP2p);
  std::lock_guard<std::mutex> hold(nccl_);
  TPLLAMA_NCCL_CHECK(ncclSend(t.data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), dest,
                              handle(comm_), stream_of(ctx_)));
}

void NcclCommunicator::recv(Tensor t, int src, int tag) {
  if (!on_device(t)) return (*ViaMpi(*this)).recv(t, src, tag);
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "recv (nccl)", TraceTrack::kP2p);
  std::lock_guard<std::mutex> hold(nccl_);
  TPLLAMA_NCCL_CHECK(ncclRecv(t.data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), src,
                              handle(comm_), stream_of(ctx_)));
}

void NcclCommunicator::send_async(Tensor t, int dest, int tag) {
  if (!on_device(t)) return (*ViaMpi(*this)).send_async(t, dest, tag);
  send(t, dest, tag);  // already asynchronous: enqueued on the stream
}

void NcclCommunicator::barrier() {
  TPLLAMA_CHECK(cudaStreamSynchronize(stream_of(ctx_)) == cudaSuccess,
                "stream synchronize before a barrier");
  (*ViaMpi(*this)).barrier();
}

void NcclCommunicator::all_reduce_argmax(std::vector<float>& values,
                                         std::vector<int32_t>& indices) {
  (*ViaMpi(*this)).all_reduce_argmax(values, indices);
}

bool NcclCommunicator::all_true(bool mine) {
  return (*ViaMpi(*this)).all_true(mine);
}

void NcclCommunicator::broadcast_bytes(std::vector<uint8_t>& bytes, int root) {
  (*ViaMpi(*this)).broadcast_bytes(bytes, root);
}

void NcclCommunicator::send_bytes_async(std::vector<uint8_t> bytes, int dest, int tag) {
  (*ViaMpi(*this)).send_bytes_async(std::move(bytes), dest, tag);
}

std::vector<uint8_t> NcclCommunicator::recv_bytes(int src, int tag) {
  return (*ViaMpi(*this)).recv_bytes(src, tag);
}

void NcclCommunicator::wait_sends() {
  // Device sends are complete once the stream has passed them (each when its peer received it).
  TPLLAMA_CHECK(cudaStreamSynchronize(stream_of(ctx_)) == cudaSuccess,
                "stream synchronize to complete sends");
  (*ViaMpi(*this)).wait_sends();
}

}  // namespace tpllama
