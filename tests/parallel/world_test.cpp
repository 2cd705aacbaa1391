// The MpiSession's world verbs with rank-dependent inputs whose results are known in closed form
// (2 and 4 ranks).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel/mpi_comm.h"
#include "parallel/mpi_session.h"
#include "test_world.h"

namespace tpllama {
namespace {

TEST(World, MinIsTheSmallestOfEveryRanksValue) {
  const MpiSession& w = test_world();
  EXPECT_EQ(w.min(100 - w.rank()), 100 - (w.world_size() - 1));
  EXPECT_EQ(w.min(w.rank() == 1 ? -(1LL << 40) : 7), -(1LL << 40)) << "64-bit values";
}

TEST(World, SumToRootAddsEveryRanksValuesOnRankZeroOnly) {
  const MpiSession& w = test_world();
  const int n = w.world_size();
  const std::vector<double> sums = w.sum_to_root({static_cast<double>(w.rank()), 1.0, 0.5});
  if (w.rank() == 0) {
    EXPECT_EQ(sums, (std::vector<double>{n * (n - 1) / 2.0, static_cast<double>(n), 0.5 * n}));
  } else {
    EXPECT_TRUE(sums.empty());
  }
}

TEST(World, GatherToRootKeepsEachRanksBytesInRankOrder) {
  const MpiSession& w = test_world();
  // Rank r sends r + 1 bytes of value r (rank 0 one byte, so sizes differ by rank).
  const std::vector<std::vector<uint8_t>> all = w.gather_to_root(
      std::vector<uint8_t>(static_cast<size_t>(w.rank() + 1), static_cast<uint8_t>(w.rank())));
  if (w.rank() != 0) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(w.world_size()));
  for (int r = 0; r < w.world_size(); ++r)
    EXPECT_EQ(all[static_cast<size_t>(r)],
              std::vector<uint8_t>(static_cast<size_t>(r + 1), static_cast<uint8_t>(r)));
}

TEST(World, AllGatherTextGivesEveryRankEveryRanksText) {
  const MpiSession& w = test_world();
  const std::string mine = "rank " + std::to_string(w.rank()) +
                           std::string(static_cast<size_t>(70 * (w.rank() == 1)), 'x');
  const std::vector<std::string> all = w.all_gather_text(mine);
  ASSERT_EQ(all.size(), static_cast<size_t>(w.world_size()));
  for (int r = 0; r < w.world_size(); ++r) {
    const std::string want = "rank " + std::to_string(r) + std::string(r == 1 ? 70 : 0, 'x');
    EXPECT_EQ(all[static_cast<size_t>(r)], want.substr(0, 63)) << "texts are kept to 63 bytes";
  }
}

TEST(World, SplitGroupsRanksByColorInKeyOrder) {
  const MpiSession& w = test_world();
  const int color = w.rank() % 2;
  std::unique_ptr<MpiCommunicator> group =
      w.split(color, -w.rank());  // reversed order within a color
  int members = 0;
  for (int r = 0; r < w.world_size(); ++r) members += r % 2 == color;
  EXPECT_EQ(group->size(), members);
  int higher = 0;  // ranks of my color above me come first
  for (int r = w.rank() + 1; r < w.world_size(); ++r) higher += r % 2 == color;
  EXPECT_EQ(group->rank(), higher);
  std::unique_ptr<MpiCommunicator> dup = w.duplicate_world();
  EXPECT_EQ(dup->size(), w.world_size());
  EXPECT_EQ(dup->rank(), w.rank());
  w.quiet_barrier();
  w.barrier();
}

}  // namespace
}  // namespace tpllama
