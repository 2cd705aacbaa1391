// Topology arithmetic without mpirun: rank → (tp_rank, pp_rank), stage splits and validation.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/topology.h"

namespace tpllama {
namespace {

TEST(Topology, TpIsTheFastestAxis) {
  Topology t(8, 5, 2, 4, 8);
  EXPECT_EQ(t.tp_rank(), 1);
  EXPECT_EQ(t.pp_rank(), 2);
  EXPECT_FALSE(t.is_first_stage());
  EXPECT_FALSE(t.is_last_stage());
}

TEST(Topology, RemainderLayersGoToMiddleStages) {
  EXPECT_EQ(default_stage_sizes(5, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(default_stage_sizes(10, 4), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(default_stage_sizes(5, 5), (std::vector<int>{1, 1, 1, 1, 1}));
}

TEST(Topology, ExplicitStageSizes) {
  Topology t(2, 1, 1, 2, 5, {1, 4});
  EXPECT_EQ(t.my_layers().begin, 1);
  EXPECT_EQ(t.my_layers().end, 5);
}

TEST(Topology, WorldMismatchNamesAllThreeNumbers) {
  try {
    Topology t(6, 0, 4, 2, 8);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("(4)"), std::string::npos) << m;
    EXPECT_NE(m.find("(2)"), std::string::npos) << m;
    EXPECT_NE(m.find("(6)"), std::string::npos) << m;
  }
}

TEST(Topology, MoreStagesThanLayersIsRefused) {
  EXPECT_THROW(Topology(6, 0, 1, 6, 5), Error);
}

TEST(Topology, StageSizesMustSumToLayers) {
  EXPECT_THROW(Topology(2, 0, 1, 2, 5, {2, 2}), Error);
}

NodeInfo nodes(int n_nodes, int per_node) {
  NodeInfo n;
  n.n_nodes = n_nodes;
  n.ranks_on_node = per_node;
  return n;
}

TEST(MakeTopology, NeitherGivenMeansTpPerNodeAndPpAcrossNodes) {
  Topology t = make_topology({}, nodes(2, 4), 8, 5, 32);
  EXPECT_EQ(t.tp_size(), 4);
  EXPECT_EQ(t.pp_size(), 2);
}

TEST(MakeTopology, OneGivenDerivesTheOther) {
  EXPECT_EQ(make_topology({2, 0, {}}, nodes(1, 8), 8, 0, 32).pp_size(), 4);
  EXPECT_EQ(make_topology({0, 4, {}}, nodes(1, 8), 8, 0, 32).tp_size(), 2);
}

TEST(MakeTopology, NonDividingRequestNamesTheNumbers) {
  try {
    make_topology({3, 0, {}}, nodes(1, 8), 8, 0, 32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 3 does not divide the number of ranks (8)"),
              std::string::npos)
        << e.what();
  }
}

// World rank = replica * (tp * pp) + pp_rank * tp + tp_rank.
TEST(Topology, ReplicasAreConsecutiveBlocksOfRanks) {
  Topology t(12, 7, 2, 3, 6, {}, 2);
  EXPECT_EQ(t.dp_size(), 2);
  EXPECT_EQ(t.replica_size(), 6);
  EXPECT_EQ(t.replica(), 1);
  EXPECT_EQ(t.replica_rank(), 1);
  EXPECT_EQ(t.tp_rank(), 1);
  EXPECT_EQ(t.pp_rank(), 0);
  EXPECT_FALSE(t.is_replica_leader());
  EXPECT_TRUE(Topology(12, 6, 2, 3, 6, {}, 2).is_replica_leader());
  EXPECT_EQ(t.pp_rank_of(11), 2);
  EXPECT_EQ(t.replica_of(5), 0);
  EXPECT_THROW(Topology(12, 0, 2, 3, 6, {}, 3), Error);
}

TEST(MakeTopology, ReplicasFillTheWorldWhenTpAndPpAreBothGiven) {
  const Topology t = make_topology({2, 2, {}}, nodes(2, 4), 8, 0, 32);
  EXPECT_EQ(t.dp_size(), 2);
  EXPECT_EQ(make_topology({2, 0, {}}, nodes(2, 4), 8, 0, 32).dp_size(), 1) << "as before --dp";
  EXPECT_EQ(make_topology({}, nodes(2, 4), 8, 0, 32).dp_size(), 1) << "as before --dp";
}

TEST(MakeTopology, DpAloneKeepsAReplicaInsideANodeWhenItFits) {
  Topology inside = make_topology({0, 0, {}, 4}, nodes(2, 4), 8, 0, 32);
  EXPECT_EQ(inside.tp_size(), 2);
  EXPECT_EQ(inside.pp_size(), 1);
  Topology across = make_topology({0, 0, {}, 1}, nodes(2, 4), 8, 0, 32);
  EXPECT_EQ(across.tp_size(), 4) << "TP over a node's ranks";
  EXPECT_EQ(across.pp_size(), 2) << "PP across the nodes";
  EXPECT_EQ(make_topology({0, 2, {}, 2}, nodes(2, 4), 8, 0, 32).tp_size(), 2);
  try {
    make_topology({0, 0, {}, 3}, nodes(2, 4), 8, 0, 32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dp 3 does not divide the number of ranks (8)"),
              std::string::npos)
        << e.what();
  }
}

TEST(MakeTopology, UnevenNodesNeedAnExplicitLayout) {
  NodeInfo n = nodes(2, 3);
  n.uniform = false;
  EXPECT_THROW(make_topology({}, n, 5, 0, 32), Error);
  EXPECT_EQ(make_topology({1, 5, {}}, n, 5, 0, 32).pp_size(), 5);
}

}  // namespace
}  // namespace tpllama
