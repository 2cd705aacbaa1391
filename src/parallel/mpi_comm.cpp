// MPI session and host-memory communicator. Errors return (MPI_ERRORS_RETURN) and become
// exceptions, which main turns into one message and MPI_Abort.
#include "parallel/mpi_comm.h"

#include <chrono>

#include "core/error.h"

namespace tpllama {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT;
    case DType::kF16:
    case DType::kBF16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

class Timer {
 public:
  Timer(double* seconds, long long* calls) : seconds_(seconds), calls_(calls) {}
  ~Timer() {
    *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    ++*calls_;
  }

 private:
  double* seconds_;
  long long* calls_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

int count_of(const Tensor& t) {
  TPLLAMA_CHECK(t.numel() <= INT32_MAX, "message of ", t.numel(), " elements");
  return static_cast<int>(t.numel());
}

}  // namespace

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void detect_nodes(Topology* topology) {
  MPI_Comm node_comm;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_comm),
            "MPI_Comm_split_type");
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node_comm, &local_rank);
  MPI_Comm_size(node_comm, &local_size);
  // Node id: number of node leaders with a lower world rank than this node's leader.
  int leader = local_rank == 0 ? 1 : 0;
  int leaders_before = 0;
  mpi_check(MPI_Exscan(&leader, &leaders_before, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Exscan");
  if (topology->rank() == 0) leaders_before = 0;  // Exscan leaves rank 0 undefined
  int node_id = local_rank == 0 ? leaders_before : 0;
  mpi_check(MPI_Bcast(&node_id, 1, MPI_INT, 0, node_comm), "MPI_Bcast");
  MPI_Comm_free(&node_comm);
  topology->set_node(node_id, local_rank, local_size);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(MPI_Comm parent, int color, int key) {
  MPI_Comm comm;
  mpi_check(MPI_Comm_split(parent, color, key, &comm), "MPI_Comm_split");
  return std::make_unique<MpiCommunicator>(comm);
}

void MpiCommunicator::all_reduce_sum(Tensor t) {
  if (size_ == 1) return;
  TPLLAMA_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kI32, "all_reduce_sum on ",
                dtype_name(t.dtype()));
  Timer timer(&stats_.collective_seconds, &stats_.collective_calls);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, t.data(), count_of(t), mpi_type(t.dtype()), MPI_SUM, comm_),
            "MPI_Allreduce");
}

void MpiCommunicator::all_gather(Tensor in, Tensor out) {
  TPLLAMA_CHECK(out.numel() == in.numel() * size_ && in.dtype() == out.dtype(), "all_gather ",
                in.shape_string(), " into ", out.shape_string());
  Timer timer(&stats_.collective_seconds, &stats_.collective_calls);
  mpi_check(MPI_Allgather(in.data(), count_of(in), mpi_type(in.dtype()), out.data(), count_of(in),
                          mpi_type(in.dtype()), comm_),
            "MPI_Allgather");
}

void MpiCommunicator::broadcast(Tensor t, int root) {
  if (size_ == 1) return;
  Timer timer(&stats_.collective_seconds, &stats_.collective_calls);
  mpi_check(MPI_Bcast(t.data(), count_of(t), mpi_type(t.dtype()), root, comm_), "MPI_Bcast");
}

void MpiCommunicator::send(Tensor t, int dest, int tag) {
  Timer timer(&stats_.p2p_seconds, &stats_.p2p_calls);
  mpi_check(MPI_Send(t.data(), count_of(t), mpi_type(t.dtype()), dest, tag, comm_), "MPI_Send");
}

void MpiCommunicator::recv(Tensor t, int src, int tag) {
  Timer timer(&stats_.p2p_seconds, &stats_.p2p_calls);
  mpi_check(MPI_Recv(t.data(), count_of(t), mpi_type(t.dtype()), src, tag, comm_, MPI_STATUS_IGNORE),
            "MPI_Recv");
}

void MpiCommunicator::barrier() {
  Timer timer(&stats_.collective_seconds, &stats_.collective_calls);
  mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace tpllama
