// The host-memory communicator (device tensors staged through the host). Errors return
// (MPI_ERRORS_RETURN) and become exceptions, which main turns into one message and MPI_Abort.
#include "parallel/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "ops/device.h"

namespace tpllama {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI32:
      return MPI_INT;
    case DType::kF16:
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kI8:
      return MPI_INT8_T;
  }
  return MPI_BYTE;
}

int count_of(const Tensor& t) {
  TPLLAMA_CHECK(t.numel() <= INT32_MAX, "message of ", t.numel(), " elements");
  return static_cast<int>(t.numel());
}

// Point-to-point tensors travel as bytes (send, send_async and recv alike), so every pair of
// calls matches in type.
int byte_count_of(const Tensor& t) {
  TPLLAMA_CHECK(t.nbytes() <= INT32_MAX, "message of ", t.nbytes(), " bytes");
  return static_cast<int>(t.nbytes());
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    for (PendingSend& p : pending_) MPI_Wait(&p.request, MPI_STATUS_IGNORE);
  if (owned_ && comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(MPI_Comm parent, int color, int key) {
  MPI_Comm comm;
  mpi_check(MPI_Comm_split(parent, color, key, &comm), "MPI_Comm_split");
  return std::make_unique<MpiCommunicator>(comm);
}

void MpiCommunicator::stage_through_host(const DeviceContext& ctx) {
  staging_ctx_ = ctx;
}

void MpiCommunicator::check_staged(const Tensor& t) const {
  TPLLAMA_CHECK(t.device() == staging_ctx_.device, "a ", device_name(t.device()),
                " tensor given to an MPI communicator that stages ",
                device_name(staging_ctx_.device));
}

Tensor MpiCommunicator::host_view(const Tensor& t, int which, bool fill) {
  if (t.device() == Device::kCpu) return t;
  check_staged(t);
  std::vector<uint8_t>& buffer = staging_[static_cast<size_t>(which)];
  if (buffer.size() < t.nbytes()) buffer.resize(t.nbytes());
  Tensor host(buffer.data(), t.dtype(), {t.numel()});
  if (fill) ops::download(staging_ctx_, buffer.data(), t);
  return host;
}

void MpiCommunicator::copy_back(const Tensor& t, const Tensor& host) {
  if (t.device() != Device::kCpu) ops::upload(staging_ctx_, t, host.data());
}

void MpiCommunicator::all_reduce_sum(Tensor device_t) {
  if (size_ == 1) return;
  TPLLAMA_CHECK(device_t.dtype() == DType::kF32 || device_t.dtype() == DType::kI32,
                "all_reduce_sum on ", dtype_name(device_t.dtype()));
  const auto start = std::chrono::steady_clock::now();
  {
    CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "all-reduce",
                    TraceTrack::kCollective);
    const Tensor t = host_view(device_t, 0, true);
    mpi_check(
        MPI_Allreduce(MPI_IN_PLACE, t.data(), count_of(t), mpi_type(t.dtype()), MPI_SUM, comm_),
        "MPI_Allreduce");
    copy_back(device_t, t);
  }
  stats_.all_reduce_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.all_reduce_bytes += static_cast<double>(device_t.nbytes());
  ++stats_.all_reduce_calls;
}

void MpiCommunicator::all_gather(Tensor device_in, Tensor device_out) {
  TPLLAMA_CHECK(
      device_out.numel() == device_in.numel() * size_ && device_in.dtype() == device_out.dtype(),
      "all_gather ", device_in.shape_string(), " into ", device_out.shape_string());
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "all-gather",
                  TraceTrack::kCollective);
  const Tensor in = host_view(device_in, 0, true), out = host_view(device_out, 1, false);
  mpi_check(MPI_Allgather(in.data(), count_of(in), mpi_type(in.dtype()), out.data(), count_of(in),
                          mpi_type(in.dtype()), comm_),
            "MPI_Allgather");
  copy_back(device_out, out);
}

void MpiCommunicator::broadcast(Tensor device_t, int root) {
  if (size_ == 1) return;
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "broadcast",
                  TraceTrack::kCollective);
  const Tensor t = host_view(device_t, 0, rank_ == root);
  mpi_check(MPI_Bcast(t.data(), count_of(t), mpi_type(t.dtype()), root, comm_), "MPI_Bcast");
  if (rank_ != root) copy_back(device_t, t);
}

void MpiCommunicator::send(Tensor device_t, int dest, int tag) {
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "send", TraceTrack::kP2p);
  const Tensor t = host_view(device_t, 0, true);
  mpi_check(MPI_Send(t.data(), byte_count_of(t), MPI_BYTE, dest, tag, comm_), "MPI_Send");
}

void MpiCommunicator::recv(Tensor device_t, int src, int tag) {
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "recv", TraceTrack::kP2p);
  const Tensor t = host_view(device_t, 0, false);
  // Probed first, so a message of another size names both sizes (a larger one would only say
  // "truncated", a smaller one would leave the end of t stale).
  MPI_Status status;
  mpi_check(MPI_Probe(src, tag, comm_, &status), "MPI_Probe");
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  TPLLAMA_CHECK(static_cast<size_t>(bytes) == t.nbytes(), "a message of ", bytes,
                " bytes from rank ", src, " for ", t.shape_string(), " ", dtype_name(t.dtype()),
                " (", t.nbytes(), " bytes)");
  mpi_check(MPI_Recv(t.data(), byte_count_of(t), MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE),
            "MPI_Recv");
  copy_back(device_t, t);
}

void MpiCommunicator::send_async(Tensor device_t, int dest, int tag) {
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "isend", TraceTrack::kP2p);
  const size_t n = static_cast<size_t>(byte_count_of(device_t));
  reap_sends();
  std::unique_ptr<std::vector<uint8_t>> bytes;
  if (!spare_.empty()) {
    bytes = std::move(spare_.back());
    spare_.pop_back();
  } else {
    bytes = std::make_unique<std::vector<uint8_t>>();
  }
  if (bytes->size() < n) bytes->resize(n);  // grows (and zero-fills) only past the largest so far
  if (device_t.device() == Device::kCpu) {
    if (n > 0) std::memcpy(bytes->data(), device_t.data(), n);
  } else {
    check_staged(device_t);
    ops::download(staging_ctx_, bytes->data(), device_t);
  }
  isend(std::move(bytes), n, true, dest, tag);
}

void MpiCommunicator::barrier() {
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "barrier",
                  TraceTrack::kCollective);
  mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
}

void MpiCommunicator::all_reduce_argmax(std::vector<float>& values, std::vector<int32_t>& indices) {
  TPLLAMA_CHECK(values.size() == indices.size(), values.size(), " values, ", indices.size(),
                " indices");
  if (size_ == 1 || values.empty()) return;
  struct Pair {
    float value;
    int index;
  };
  std::vector<Pair> pairs(values.size());
  for (size_t i = 0; i < values.size(); ++i) pairs[i] = {values[i], indices[i]};
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "argmax all-reduce",
                  TraceTrack::kCollective);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, pairs.data(), static_cast<int>(pairs.size()), MPI_FLOAT_INT,
                          MPI_MAXLOC, comm_),
            "MPI_Allreduce(MAXLOC)");
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = pairs[i].value;
    indices[i] = pairs[i].index;
  }
}

bool MpiCommunicator::all_true(bool mine) {
  if (size_ == 1) return mine;
  int all = mine ? 1 : 0;
  CommTimer timer(&stats_.collective_seconds, &stats_.collective_calls, trace_, "agreement",
                  TraceTrack::kCollective);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_LAND, comm_), "MPI_Allreduce(LAND)");
  return all != 0;
}

void MpiCommunicator::broadcast_bytes(std::vector<uint8_t>& bytes, int root) {
  if (size_ == 1) return;
  // The plan broadcast is a message from rank 0, most of it waiting: counted with point-to-point.
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "receive plan", TraceTrack::kP2p);
  long long n = static_cast<long long>(bytes.size());
  mpi_check(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm_), "MPI_Bcast");
  TPLLAMA_CHECK(n >= 0 && n <= INT32_MAX, "broadcast of ", n, " bytes");
  bytes.resize(static_cast<size_t>(n));
  mpi_check(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, root, comm_), "MPI_Bcast");
}

void MpiCommunicator::send_bytes_async(std::vector<uint8_t> bytes, int dest, int tag) {
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "isend", TraceTrack::kP2p);
  reap_sends();
  const size_t n = bytes.size();
  isend(std::make_unique<std::vector<uint8_t>>(std::move(bytes)), n, false, dest, tag);
}

// The message's bytes are kept with its request until MPI is done with them.
void MpiCommunicator::isend(std::unique_ptr<std::vector<uint8_t>> bytes, size_t count, bool pooled,
                            int dest, int tag) {
  TPLLAMA_CHECK(count <= INT32_MAX && count <= bytes->size(), "message of ", count, " bytes");
  PendingSend p{MPI_REQUEST_NULL, std::move(bytes), pooled};
  mpi_check(
      MPI_Isend(p.bytes->data(), static_cast<int>(count), MPI_BYTE, dest, tag, comm_, &p.request),
      "MPI_Isend");
  pending_.push_back(std::move(p));
}

bool MpiCommunicator::retire(size_t i, bool wait) {
  PendingSend& p = pending_[i];
  int done = 1;
  if (wait)
    mpi_check(MPI_Wait(&p.request, MPI_STATUS_IGNORE), "MPI_Wait");
  else
    mpi_check(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (!done) return false;
  constexpr size_t kSpares = 4;  // more than the sends a stage has in flight
  if (p.pooled && spare_.size() < kSpares) spare_.push_back(std::move(p.bytes));
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

std::vector<uint8_t> MpiCommunicator::recv_bytes(int src, int tag) {
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "recv (wait)", TraceTrack::kP2p);
  MPI_Status status;
  mpi_check(MPI_Probe(src, tag, comm_, &status), "MPI_Probe");
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  mpi_check(MPI_Recv(bytes.data(), count, MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE),
            "MPI_Recv");
  return bytes;
}

std::optional<std::vector<uint8_t>> MpiCommunicator::try_recv_bytes(int src, int tag, int* from) {
  int arrived = 0;
  MPI_Status status;
  mpi_check(MPI_Iprobe(src == kAnySource ? MPI_ANY_SOURCE : src, tag, comm_, &arrived, &status),
            "MPI_Iprobe");
  if (arrived == 0) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  mpi_check(
      MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE),
      "MPI_Recv");
  if (from != nullptr) *from = status.MPI_SOURCE;
  return bytes;
}

std::unique_ptr<Communicator> MpiCommunicator::second_handle() {
  return std::make_unique<MpiCommunicator>(comm_, /*owned=*/false);
}

void MpiCommunicator::reap_sends() {
  for (size_t i = 0; i < pending_.size();)
    if (!retire(i, false)) ++i;
}

void MpiCommunicator::wait_sends() {
  CommTimer timer(&stats_.p2p_seconds, &stats_.p2p_calls, trace_, "wait sends", TraceTrack::kP2p);
  while (!pending_.empty()) retire(0, true);
}

}  // namespace tpllama
