// The test communicator itself (thread_comm.h), before the pipeline test trusts it: collectives on
// rank-dependent data give their closed forms, messages keep their order per tag, and a wait that
// nothing answers, a rank that fails or a group that calls different collectives ends every wait
// with an error instead of a hang.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"
#include "thread_comm.h"

namespace tpllama {
namespace {

using testing_util::run_ranks;
using testing_util::ThreadComm;
using testing_util::ThreadNet;

bool all_empty(const std::vector<std::string>& errors) {
  for (const std::string& e : errors)
    if (!e.empty()) return false;
  return true;
}

std::string joined(const std::vector<std::string>& errors) {
  std::string all;
  for (size_t r = 0; r < errors.size(); ++r)
    all += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  return all;
}

TEST(ThreadComm, CollectivesGiveTheirClosedForms) {
  constexpr int kRanks = 3;
  ThreadNet net;
  const int group = net.add_group(kRanks);
  const std::vector<std::string> errors = run_ranks(net, kRanks, [&](int r) {
    ThreadComm comm(net, group, r);
    // Sum over ranks of (r + 1) * (i + 1): 6 * (i + 1).
    std::vector<float> x(5);
    for (int i = 0; i < 5; ++i) x[static_cast<size_t>(i)] = static_cast<float>((r + 1) * (i + 1));
    comm.all_reduce_sum(Tensor(x.data(), DType::kF32, {5}));
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(x[static_cast<size_t>(i)], 6.0f * static_cast<float>(i + 1));

    std::vector<int32_t> mine{r, 10 * r}, all(2 * kRanks, -1);
    comm.all_gather(Tensor(mine.data(), DType::kI32, {2}),
                    Tensor(all.data(), DType::kI32, {2 * kRanks}));
    EXPECT_EQ(all, (std::vector<int32_t>{0, 0, 1, 10, 2, 20}));

    // Element 0: rank 2 holds the largest; element 1: all tie, so the smallest index wins.
    std::vector<float> values{static_cast<float>(r), 1.0f};
    std::vector<int32_t> indices{100 + r, 50 - r};
    comm.all_reduce_argmax(values, indices);
    EXPECT_EQ(values, (std::vector<float>{2.0f, 1.0f}));
    EXPECT_EQ(indices, (std::vector<int32_t>{102, 48}));

    std::vector<uint8_t> bytes;
    if (r == 1) bytes = {7, 8, 9};
    comm.broadcast_bytes(bytes, 1);
    EXPECT_EQ(bytes, (std::vector<uint8_t>{7, 8, 9}));
    float y = r == 2 ? 2.5f : 0.0f;
    comm.broadcast(Tensor(&y, DType::kF32, {1}), 2);
    EXPECT_EQ(y, 2.5f);

    EXPECT_TRUE(comm.all_true(true));
    EXPECT_FALSE(comm.all_true(r != 1));
    comm.barrier();
  });
  EXPECT_TRUE(all_empty(errors)) << joined(errors);
}

TEST(ThreadComm, MessagesArriveInOrderPerTagAndSendsWaitForTheirReceiver) {
  ThreadNet net;
  const int group = net.add_group(2);
  const std::vector<std::string> errors = run_ranks(net, 2, [&](int r) {
    ThreadComm comm(net, group, r);
    if (r == 0) {
      comm.send_bytes_async({1}, 1, 5);
      comm.send_bytes_async({2}, 1, 6);
      comm.send_bytes_async({3}, 1, 5);
      float x = 4.0f;
      comm.send(Tensor(&x, DType::kF32, {1}), 1, 7);  // returns once rank 1 has it
      comm.wait_sends();
    } else {
      float x = 0;
      comm.recv(Tensor(&x, DType::kF32, {1}), 0, 7);
      EXPECT_EQ(x, 4.0f);
      EXPECT_EQ(comm.recv_bytes(0, 6), std::vector<uint8_t>{2});
      EXPECT_EQ(comm.recv_bytes(0, 5), std::vector<uint8_t>{1});
      EXPECT_EQ(comm.recv_bytes(0, 5), std::vector<uint8_t>{3});
    }
  });
  EXPECT_TRUE(all_empty(errors)) << joined(errors);
  EXPECT_EQ(net.undelivered(), 0);
}

TEST(ThreadComm, AWaitNothingAnswersFailsAtTheTimeoutNamingIt) {
  ThreadNet net(std::chrono::milliseconds(200));
  const int group = net.add_group(2);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_ranks(net, 2, [&](int r) {
    ThreadComm comm(net, group, r);
    if (r == 1) comm.recv_bytes(0, 9);  // rank 0 never sends
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("group 0 rank 1: receive from rank 0 (tag 9): nothing came for 200 ms"),
            std::string::npos)
      << errors[1];
}

TEST(ThreadComm, ARankThatFailsReleasesThePeersWaitingForIt) {
  ThreadNet net;  // 30 s: the peers must not wait that long
  const int group = net.add_group(3);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_ranks(net, 3, [&](int r) {
    ThreadComm comm(net, group, r);
    if (r == 2) throw Error("a bug on rank 2");
    comm.barrier();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(errors[2], "a bug on rank 2");
  for (int r : {0, 1})
    EXPECT_NE(errors[static_cast<size_t>(r)].find("aborted (rank 2 failed: a bug on rank 2)"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
}

// Whichever rank comes second names the mismatch; the other is released from its wait.
TEST(ThreadComm, RanksCallingDifferentCollectivesAreStopped) {
  ThreadNet net;
  const int group = net.add_group(2);
  const std::vector<std::string> errors = run_ranks(net, 2, [&](int r) {
    ThreadComm comm(net, group, r);
    if (r == 0)
      comm.barrier();
    else
      comm.all_true(true);
  });
  const std::string all = joined(errors);
  EXPECT_NE(errors[0], "");
  EXPECT_NE(errors[1], "");
  const bool barrier_first =
      all.find("all_true while rank(s) of the group called barrier") != std::string::npos;
  const bool all_true_first =
      all.find("barrier while rank(s) of the group called all_true") != std::string::npos;
  EXPECT_TRUE(barrier_first != all_true_first) << all;
  EXPECT_NE(all.find("the run was aborted"), std::string::npos) << all;
}

}  // namespace
}  // namespace tpllama
