// SelfCommunicator: a group of one rank, for runs and tests without an MPI launcher. Collectives
// are identities; point-to-point has no peer and is an error.
#pragma once

#include <cstring>

#include "core/error.h"
#include "parallel/communicator.h"

namespace tpllama {

class SelfCommunicator final : public Communicator {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce_sum(Tensor) override {}
  void all_gather(Tensor in, Tensor out) override {
    TPLLAMA_CHECK(in.nbytes() == out.nbytes(), "all_gather ", in.shape_string(), " into ",
                  out.shape_string());
    if (in.data() != out.data()) std::memcpy(out.data(), in.data(), in.nbytes());
  }
  void broadcast(Tensor, int) override {}
  void send(Tensor, int dest, int) override { fail("send to rank ", dest, " in a group of one"); }
  void recv(Tensor, int src, int) override { fail("recv from rank ", src, " in a group of one"); }
  void send_async(Tensor, int dest, int) override {
    fail("send to rank ", dest, " in a group of one");
  }
  void barrier() override {}
  void all_reduce_argmax(std::vector<float>&, std::vector<int32_t>&) override {}
  bool all_true(bool mine) override { return mine; }
  void broadcast_bytes(std::vector<uint8_t>&, int) override {}
  void send_bytes_async(std::vector<uint8_t>, int dest, int) override {
    fail("send to rank ", dest, " in a group of one");
  }
  std::vector<uint8_t> recv_bytes(int src, int) override {
    fail("recv from rank ", src, " in a group of one");
  }
  void wait_sends() override {}
};

}  // namespace tpllama
