// Communicator collectives and messages with rank-dependent data whose result is known in closed
// form (the nccl-tests approach). Runs under mpirun at 2 and 4 ranks.
#include <mpi.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel/mpi_comm.h"

namespace tpllama {
namespace {

class Collectives : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    comm_ = std::make_unique<MpiCommunicator>(dup);
    n_ = comm_->size();
    r_ = comm_->rank();
    ASSERT_GE(n_, 2) << "run under mpirun with at least 2 ranks";
  }
  std::unique_ptr<MpiCommunicator> comm_;
  int n_ = 1, r_ = 0;
};

TEST_F(Collectives, AllReduceSumOfRankDependentData) {
  const int count = 1000;
  std::vector<float> v(count);
  for (int i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>(r_ * 1000 + i);
  comm_->all_reduce_sum(Tensor(v.data(), DType::kF32, {count}));
  for (int i = 0; i < count; ++i)  // sum over r of (1000 r + i) = 1000 n(n-1)/2 + n i
    ASSERT_EQ(v[static_cast<size_t>(i)], static_cast<float>(1000 * n_ * (n_ - 1) / 2 + n_ * i))
        << "element " << i;
}

TEST_F(Collectives, AllGatherPlacesEachRankAtItsOffset) {
  const int count = 7;
  std::vector<float> in(count), out(static_cast<size_t>(count * n_), -1);
  for (int j = 0; j < count; ++j) in[static_cast<size_t>(j)] = static_cast<float>(r_ * 10 + j);
  comm_->all_gather(Tensor(in.data(), DType::kF32, {count}),
                    Tensor(out.data(), DType::kF32, {count * n_}));
  for (int q = 0; q < n_; ++q)
    for (int j = 0; j < count; ++j)
      ASSERT_EQ(out[static_cast<size_t>(q * count + j)], static_cast<float>(q * 10 + j));
}

TEST_F(Collectives, BroadcastFromANonZeroRoot) {
  std::vector<int32_t> v(5, r_);
  comm_->broadcast(Tensor(v.data(), DType::kI32, {5}), 1);
  for (int32_t x : v) ASSERT_EQ(x, 1);
}

TEST_F(Collectives, SendRecvAroundARing) {
  std::vector<float> out(16), in(16, -1);
  for (int j = 0; j < 16; ++j) out[static_cast<size_t>(j)] = static_cast<float>(r_ * 7 + j);
  const int next = (r_ + 1) % n_, prev = (r_ + n_ - 1) % n_;
  if (r_ % 2 == 0) {  // even ranks send first so the blocking pair cannot deadlock
    comm_->send(Tensor(out.data(), DType::kF32, {16}), next, 5);
    comm_->recv(Tensor(in.data(), DType::kF32, {16}), prev, 5);
  } else {
    comm_->recv(Tensor(in.data(), DType::kF32, {16}), prev, 5);
    comm_->send(Tensor(out.data(), DType::kF32, {16}), next, 5);
  }
  for (int j = 0; j < 16; ++j)
    ASSERT_EQ(in[static_cast<size_t>(j)], static_cast<float>(prev * 7 + j));
}

TEST_F(Collectives, AsyncByteMessagesAroundARing) {
  // Every rank sends before it receives: only non-blocking sends make this safe.
  std::vector<uint8_t> msg(100000 + static_cast<size_t>(r_));
  for (size_t i = 0; i < msg.size(); ++i)
    msg[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(r_));
  const int next = (r_ + 1) % n_, prev = (r_ + n_ - 1) % n_;
  comm_->send_bytes_async(msg, next, 9);
  std::vector<uint8_t> got = comm_->recv_bytes(prev, 9);
  comm_->wait_sends();
  ASSERT_EQ(got.size(), 100000u + static_cast<size_t>(prev));
  for (size_t i = 0; i < got.size(); i += 997)
    ASSERT_EQ(got[i], static_cast<uint8_t>(i * 31 + static_cast<size_t>(prev)));
}

TEST_F(Collectives, AsyncTensorSendsAroundARingOwnTheirBytes) {
  // Every rank sends before it receives, and overwrites its tensor at once: the message must
  // carry the values as they were at the call. Two messages per pair, received in order.
  const int count = 50000 + r_;  // each rank's size differs, so a mixed-up pair shows
  std::vector<float> out(static_cast<size_t>(count));
  const int next = (r_ + 1) % n_, prev = (r_ + n_ - 1) % n_;
  for (int round = 0; round < 2; ++round) {
    for (int j = 0; j < count; ++j)
      out[static_cast<size_t>(j)] = static_cast<float>(r_ * 100000 + j + round);
    comm_->send_async(Tensor(out.data(), DType::kF32, {count}), next, 11);
    std::fill(out.begin(), out.end(), -1.0f);
  }
  const int prev_count = 50000 + prev;
  std::vector<float> in(static_cast<size_t>(prev_count));
  for (int round = 0; round < 2; ++round) {
    comm_->recv(Tensor(in.data(), DType::kF32, {prev_count}), prev, 11);
    for (int j = 0; j < prev_count; j += 101)
      ASSERT_EQ(in[static_cast<size_t>(j)], static_cast<float>(prev * 100000 + j + round))
          << "round " << round;
  }
  comm_->wait_sends();
}

TEST_F(Collectives, RecvOfAMessageOfAnotherSizeNamesBothSizes) {
  // Rank 0 sends 10 floats; rank 1 expects 12. The message is then drained as bytes.
  if (r_ == 0) {
    std::vector<float> out(10, 1.0f);
    comm_->send_async(Tensor(out.data(), DType::kF32, {10}), 1, 12);
    comm_->wait_sends();
  } else if (r_ == 1) {
    std::vector<float> in(12, 0.0f);
    try {
      comm_->recv(Tensor(in.data(), DType::kF32, {12}), 0, 12);
      ADD_FAILURE() << "a 40-byte message was taken for 48 bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("40 bytes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("48 bytes"), std::string::npos) << e.what();
    }
    EXPECT_EQ(comm_->recv_bytes(0, 12).size(), 40u);
  }
  comm_->barrier();
}

TEST_F(Collectives, ArgmaxReducesValueAndIndexWithTiesToTheLowestIndex) {
  // Element 0: rank n-1 holds the maximum. Element 1: every rank ties; the lowest index wins.
  std::vector<float> values = {static_cast<float>(r_), 5.0f};
  std::vector<int32_t> indices = {100 + r_, 200 + (n_ - 1 - r_)};
  comm_->all_reduce_argmax(values, indices);
  EXPECT_EQ(values[0], static_cast<float>(n_ - 1));
  EXPECT_EQ(indices[0], 100 + n_ - 1);
  EXPECT_EQ(values[1], 5.0f);
  EXPECT_EQ(indices[1], 200);
}

TEST_F(Collectives, AllTrueIsTheConjunctionOverRanks) {
  EXPECT_TRUE(comm_->all_true(true));
  EXPECT_FALSE(comm_->all_true(false));
  // One rank says no, in turn each of them: every rank gets false.
  for (int no = 0; no < n_; ++no)
    EXPECT_FALSE(comm_->all_true(r_ != no)) << "rank " << no << " said no";
}

TEST_F(Collectives, BroadcastBytesResizesReceivers) {
  std::vector<uint8_t> bytes;
  if (r_ == 0) bytes = {1, 2, 3, 4, 5};
  comm_->broadcast_bytes(bytes, 0);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
}

TEST_F(Collectives, SplitFormsTpGroupsOfConsecutiveRanks) {
  const int tp = 2;
  auto group = MpiCommunicator::split(MPI_COMM_WORLD, r_ / tp, r_ % tp);
  EXPECT_EQ(group->rank(), r_ % tp);
  std::vector<int32_t> v = {r_};
  group->all_reduce_sum(Tensor(v.data(), DType::kI32, {1}));
  const int first = r_ / tp * tp;
  EXPECT_EQ(v[0], first + (first + 1 < n_ ? first + 1 : 0));
}

}  // namespace
}  // namespace tpllama
