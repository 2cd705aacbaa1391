// MpiCommunicator: a group's tensors and messages over MPI, in host memory or device memory
// staged through the host (--comm mpi, which lets several ranks share one GPU).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_session.h"

namespace tpllama {

// Move-only owner of an MPI communicator (never MPI_COMM_WORLD itself).
class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm, unless !owned (a second handle on another's group).
  explicit MpiCommunicator(MPI_Comm comm, bool owned = true);
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
  std::optional<std::vector<uint8_t>> try_recv_bytes(int src, int tag, int* from) override;
  std::unique_ptr<Communicator> second_handle() override;
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
  void isend(std::unique_ptr<std::vector<uint8_t>> bytes, size_t count, bool pooled, int dest,
             int tag);
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
  bool owned_ = true;
  int size_ = 1;
  int rank_ = 0;
};

}  // namespace tpllama
