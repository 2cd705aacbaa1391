// The layout planner's memory figures against closed-form byte counts, its layout validity and
// its ranking.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/shapes.h"
#include "planner/planner.h"

namespace tpllama {
namespace {

PlanRequest cluster(const std::string& shape, int nodes, int per_node, const std::string& gpu) {
  PlanRequest r;
  r.config = shape_config(shape);
  r.nodes = nodes;
  r.ranks_per_node = per_node;
  r.device = device_spec(gpu);
  r.intra = link_spec("nvlink");
  r.inter = link_spec("infiniband");
  return r;
}

PlanRequest llama2_7b(int nodes, int per_node, const std::string& gpu) {
  return cluster("llama2-7b", nodes, per_node, gpu);
}

TEST(Plan, OneRankHoldsTheWholeModelInBf16) {
  const std::vector<LayoutPlan> plans = plan_layouts(llama2_7b(1, 1, "a100-80g"));
  ASSERT_EQ(plans.size(), 1u);
  const uint64_t d = 4096, h = 11008, v = 32000, l = 32;
  const uint64_t elements = 2 * v * d + l * (4 * d * d + 3 * d * h + 2 * d) + d;  // untied head
  EXPECT_EQ(plans[0].weight_bytes, elements * 2);
  EXPECT_EQ(plans[0].kv_bytes_per_token, l * 2 * d * 2);
  EXPECT_TRUE(plans[0].fits);
  EXPECT_GT(plans[0].decode_tokens_per_s, 0);
}

TEST(Plan, TensorParallelSplitsWeightsAndKv) {
  const std::vector<LayoutPlan> plans = plan_layouts(llama2_7b(1, 4, "a100-40g"));
  const LayoutPlan* tp4 = nullptr;
  for (const LayoutPlan& p : plans)
    if (p.tp == 4) tp4 = &p;
  ASSERT_NE(tp4, nullptr);
  EXPECT_EQ(tp4->kv_bytes_per_token, 32u * 2 * 1024 * 2);  // a quarter of the kv heads
  // The norms are replicated, the rest split four ways.
  const uint64_t d = 4096, h = 11008, v = 32000, l = 32;
  EXPECT_EQ(tp4->weight_bytes, (2 * v * d / 4 + l * ((4 * d * d + 3 * d * h) / 4 + 2 * d) + d) * 2);
}

TEST(Plan, APipelineWithOneSequenceWaitsStageByStage) {
  // One sequence is one micro-batch group: it passes the two stages in turn, so each stage idles
  // half the time and the pipeline decodes no faster than one rank; two TP ranks halve the step.
  PlanRequest r = llama2_7b(1, 2, "a100-80g");
  r.max_seqs = 1;
  r.dp = 1;  // the two ranks in one replica
  std::vector<LayoutPlan> plans = plan_layouts(r);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].tp, 2);  // ranked first
  const LayoutPlan& pp2 = plans[1];
  EXPECT_EQ(pp2.pp, 2);
  EXPECT_NEAR(pp2.bubble_fraction, 0.5, 0.01);
  EXPECT_NEAR(pp2.prefill_tokens_per_s, plans[0].prefill_tokens_per_s / 2,
              plans[0].prefill_tokens_per_s * 0.01);
  PlanRequest one = llama2_7b(1, 1, "a100-80g");
  one.max_seqs = 1;
  EXPECT_NEAR(pp2.decode_tokens_per_s, plan_layouts(one)[0].decode_tokens_per_s,
              0.02 * pp2.decode_tokens_per_s);
  // With a sequence per stage, both groups are in flight and the bubble is gone.
  r.max_seqs = 2;
  for (const LayoutPlan& p : plan_layouts(r))
    if (p.pp == 2) {
      EXPECT_LT(p.bubble_fraction, 0.01);
    }
}

TEST(Plan, InvalidLayoutsSayWhyAndFittingOnesComeFirst) {
  PlanRequest r = llama2_7b(1, 3, "a100-40g");  // 32 heads do not split 3 ways
  r.dp = 1;
  std::vector<LayoutPlan> plans = plan_layouts(r);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].tp, 1);
  EXPECT_TRUE(plans[0].fits);
  EXPECT_FALSE(plans[1].fits);
  EXPECT_NE(plans[1].problem.find("not divisible by tp (3)"), std::string::npos)
      << plans[1].problem;
}

// A model that fits one GPU is replicated, not cut into stages: each replica decodes as the model
// on one GPU does, and the job as all of them together (closed form: dp times one replica).
TEST(Plan, AModelThatFitsIsReplicatedWithoutABubble) {
  PlanRequest r = cluster("llama3-8b", 16, 8, "h100-80g");
  const std::vector<LayoutPlan> plans = plan_layouts(r);
  ASSERT_TRUE(plans[0].fits);
  EXPECT_EQ(plans[0].dp, 128);
  EXPECT_EQ(plans[0].tp * plans[0].pp, 1);
  EXPECT_EQ(plans[0].bubble_fraction, 0.0);
  PlanRequest one = r;
  one.nodes = 1;
  one.ranks_per_node = 1;
  EXPECT_NEAR(plans[0].decode_tokens_per_s, 128 * plan_layouts(one)[0].decode_tokens_per_s,
              1e-6 * plans[0].decode_tokens_per_s);
  r.dp = 1;  // one replica over the whole cluster: what the plan ranked first before --dp
  EXPECT_GT(plans[0].decode_tokens_per_s, plan_layouts(r)[0].decode_tokens_per_s);
}

// A model too large for one GPU: the smallest split that fits, replicated over the rest.
TEST(Plan, ALargeModelIsSplitAsLittleAsItMustAndReplicated) {
  const std::vector<LayoutPlan> plans = plan_layouts(cluster("llama2-70b", 1, 8, "a100-80g"));
  ASSERT_TRUE(plans[0].fits);
  EXPECT_GE(plans[0].tp * plans[0].pp, 2) << "140 GB of bf16 weights fit no one 80 GB GPU";
  EXPECT_EQ(plans[0].dp * plans[0].tp * plans[0].pp, 8);
  for (const LayoutPlan& p : plans)
    if (p.tp * p.pp == 1) {
      EXPECT_FALSE(p.fits);
    }
}

TEST(Plan, AModelTooLargeDoesNotFit) {
  const std::vector<LayoutPlan> plans = plan_layouts(cluster("llama2-70b", 1, 1, "a100-80g"));
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_FALSE(plans[0].fits);
  EXPECT_NE(plans[0].problem.find("does not fit"), std::string::npos);
}

TEST(Plan, UnknownDeviceIsNamed) {
  try {
    device_spec("tpu-v5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tpu-v5"), std::string::npos);
  }
}

// Rank counts are multiplied in 64 bits: 100000 x 100000 is 10^10 ranks (10^10 mod 2^32 in an int
// was a "pp 1410065408" layout), refused with the count.
TEST(Plan, ClustersBeyondTheRankLimitAreRefusedWithTheirSize) {
  for (const int n : {65536, 100000}) {
    PlanRequest r = llama2_7b(n, n, "h100-80g");
    try {
      plan_layouts(r);
      FAIL() << n << " x " << n;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has " + std::to_string(static_cast<long long>(n) * n) +
                                           " ranks"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(plan_layouts(llama2_7b(8, 8, "h100-80g")));
}

// int8 (CPU): 1 byte per weight plus a 4-byte scale and a 4-byte accumulator bias per row and group
// of 128 (17/16 bytes), and a TP split of 11008 FFN columns into 2752-column parts, not whole
// groups, is a layout run refuses, so plan says why instead of recommending it.
TEST(Plan, Int8CountsItsScalesAndRefusesSplitsThatCutGroups) {
  PlanRequest r = llama2_7b(1, 4, "cpu");
  r.dtype = DType::kI8;
  const std::vector<LayoutPlan> plans = plan_layouts(r);
  const uint64_t d = 4096, h = 11008, v = 32000, l = 32;
  const uint64_t elements = 2 * v * d + l * (4 * d * d + 3 * d * h + 2 * d) + d;
  bool saw_tp4 = false;
  for (const LayoutPlan& p : plans) {
    if (p.tp == 4) {
      saw_tp4 = true;
      EXPECT_FALSE(p.fits);
      EXPECT_NE(p.problem.find("quantizes model.layers.0.mlp.down_proj.weight per group of 128 of "
                               "its 11008 columns"),
                std::string::npos)
          << p.problem;
    } else if (p.tp == 1 && p.pp == 4) {
      EXPECT_NEAR(static_cast<double>(p.weight_bytes),
                  static_cast<double>(elements) * 17.0 / 16.0 / 4.0,
                  0.05 * static_cast<double>(elements) / 4.0)
          << "the heaviest stage's share";
    }
  }
  EXPECT_TRUE(saw_tp4);
}

}  // namespace
}  // namespace tpllama
