// MPI session (init/finalize, world and node queries) and MpiCommunicator: host memory, or device
// memory staged through the host (--comm mpi, which lets several ranks share one GPU).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace tpllama {

// Throws tpllama::Error with the MPI error string when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what);

// Owns MPI_Init_thread / MPI_Finalize for the process.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  // Ends every rank of the job at once: the only safe exit after a failure on one rank.
  [[noreturn]] void abort(int code) const;

 private:
  int world_size_ = 1;
  int rank_ = 0;
};

// An error whose message the failing rank has already printed; every rank knows of it.
class ReportedError : public Error {
 public:
  using Error::Error;
};

// Runs fn on every rank, then agrees on the outcome: when it threw anywhere, the lowest failing
// rank prints its message (once for the job, not once per rank) and every rank throws
// ReportedError. fn must not call collectives: a rank that failed early would never join them.
void collective_phase(const std::function<void()>& fn);

// Fills NodeInfo from MPI_Comm_split_type(SHARED) and the processor names (collective).
NodeInfo detect_nodes();

// Move-only owner of an MPI communicator (never MPI_COMM_WORLD itself).
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);  // takes ownership of comm
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // MPI_Comm_split of `parent` by color, ordered by key.
  static std::unique_ptr<MpiCommunicator> split(MPI_Comm parent, int color, int key);
  // Tensors on ctx's device are then copied to host memory, moved by MPI and copied back.
  void stage_through_host(const DeviceContext& ctx);

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(Tensor t) override;
  void all_gather(Tensor in, Tensor out) override;
  void broadcast(Tensor t, int root) override;
  void send(Tensor t, int dest, int tag) override;
  void recv(Tensor t, int src, int tag) override;
  void send_async(Tensor t, int dest, int tag) override;
  void barrier() override;
  void all_reduce_argmax(std::vector<float>& values, std::vector<int32_t>& indices) override;
  bool all_true(bool mine) override;
  void broadcast_bytes(std::vector<uint8_t>& bytes, int root) override;
  void send_bytes_async(std::vector<uint8_t> bytes, int dest, int tag) override;
  std::vector<uint8_t> recv_bytes(int src, int tag) override;
  void wait_sends() override;
  MPI_Comm handle() const { return comm_; }

 private:
  struct PendingSend {
    MPI_Request request;
    std::unique_ptr<std::vector<uint8_t>> bytes;  // the message is a prefix of them
    bool pooled;  // a tensor message's buffer: back to spare_ once sent
  };
  void reap_sends();
  // Completes pending_[i] (when done) and drops it; false while it is still in flight.
  bool retire(size_t i, bool wait);
  void isend(std::unique_ptr<std::vector<uint8_t>> bytes, size_t count, bool pooled, int dest, int tag);
  // t itself when it is host memory, else a host copy in staging buffer `which` (filled from the
  // device when fill); copy_back returns the host bytes to a device tensor.
  Tensor host_view(const Tensor& t, int which, bool fill);
  // A device tensor must be on the device this communicator stages.
  void check_staged(const Tensor& t) const;
  void copy_back(const Tensor& t, const Tensor& host);

  std::vector<PendingSend> pending_;
  // Buffers of sent tensor messages, kept for the next ones (a step's hidden states are the same
  // size every time: no allocation, page faults or zero fill per step).
  std::vector<std::unique_ptr<std::vector<uint8_t>>> spare_;
  DeviceContext staging_ctx_;
  std::vector<uint8_t> staging_[2];
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  int rank_ = 0;
};

}  // namespace tpllama
