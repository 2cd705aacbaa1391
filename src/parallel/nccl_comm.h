// NcclCommunicator: the collectives of a TP group, and the hidden states between the stages of a
// pipeline, on device memory through NCCL, enqueued on the rank's compute stream, so they order
// with the kernels around them and never block the host.
// Host tensors and byte messages go through the group's MPI communicator, which also carried the
// NCCL unique id at start-up. A watchdog thread ends the rank on an asynchronous NCCL error (a
// broken link, a peer that stopped answering), so the launcher ends the job instead of every rank
// waiting forever on a collective that cannot finish. Compiled only with CUDA; made by
// make_group_communicator.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/device_context.h"
#include "parallel/mpi_comm.h"

namespace tpllama {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over mpi's group: rank 0 creates the unique id and broadcasts it. `group` names
  // the group in errors ("TP group").
  NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, const DeviceContext& ctx,
                   std::string group);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return mpi_->size(); }
  int rank() const override { return mpi_->rank(); }
  void all_reduce_sum(Tensor t) override;
  void all_gather(Tensor in, Tensor out) override;
  void broadcast(Tensor t, int root) override;
  // On a device the messages of a pair are matched in call order; the tag is not used. Every
  // device send is asynchronous to the host: it is enqueued on the stream, where it waits for
  // the peer's matching recv.
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
  void set_trace(TraceRecorder* trace) override;
  bool graph_capturable() const override { return true; }
  bool sends_hold_stream() const override { return true; }

 private:
  // While alive, what the MPI communicator spends is added to our statistics.
  class ViaMpi;
  bool on_device(const Tensor& t) const;
  // The watchdog, on `device`: asks NCCL for an asynchronous error every kWatchInterval until the
  // destructor stops it.
  void watch(int device);

  std::unique_ptr<MpiCommunicator> mpi_;
  DeviceContext ctx_;
  std::string group_;
  void* comm_ = nullptr;  // ncclComm_t
  std::mutex nccl_;       // one thread at a time in NCCL: the rank's calls and the watchdog's query
  std::mutex stop_;
  std::condition_variable wake_;
  bool stopping_ = false;  // under stop_
  std::thread watchdog_;
};

}  // namespace tpllama
