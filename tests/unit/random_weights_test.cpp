// Random weights are one model whatever the layout: every TP/PP slice holds exactly the elements
// of the one-rank model at the positions the shard table names.
#include <gtest/gtest.h>

#include <cmath>

#include "model/llama2c.h"
#include "model/shard_table.h"
#include "model/weights.h"

namespace tpllama {
namespace {

TEST(RandomWeights, SlicesOfEveryLayoutAreTheOneRankModel) {
  LlamaConfig c = shape_config("tiny");
  c.vocab_size = 501;  // uneven over 2 ranks: the last vocab shard is padded
  const ModelWeights one = random_weights(c, Topology::single(c.n_layers), DeviceContext{}, DType::kF32, 7);
  for (int rank = 0; rank < 4; ++rank) {
    const Topology t(4, rank, 2, 2, c.n_layers, {});  // tp 2 x pp 2
    const ModelWeights part = random_weights(c, t, DeviceContext{}, DType::kF32, 7);
    const HeadLayout h = head_layout(c, 2, t.tp_rank());
    const int first = t.my_layers().begin;
    for (size_t l = 0; l < part.layers.size(); ++l) {
      const LayerWeights& p = part.layers[l];
      const LayerWeights& o = one.layers[static_cast<size_t>(first) + l];
      const int q0 = h.head_begin * c.head_dim;
      for (int r = 0; r < p.wq.rows; r += 7)  // column-parallel: rows of the full matrix
        for (int k = 0; k < c.dim; k += 5) ASSERT_EQ(ops::weight_at(p.wq, r, k), ops::weight_at(o.wq, q0 + r, k));
      for (int r = 0; r < c.dim; r += 7)  // row-parallel: columns of the full matrix
        for (int k = 0; k < p.w2.cols; k += 5)
          ASSERT_EQ(ops::weight_at(p.w2, r, k), ops::weight_at(o.w2, r, h.ffn_begin + k));
      for (int i = 0; i < c.dim; ++i) ASSERT_EQ(p.attn_norm.as<float>()[i], o.attn_norm.as<float>()[i]);
    }
    if (t.is_last_stage()) {
      const int vl = vocab_local(c, 2), v0 = t.tp_rank() * vl;
      for (int r = 0; r < vl; r += 3)
        for (int k = 0; k < c.dim; k += 11)
          ASSERT_EQ(ops::weight_at(part.lm_head, r, k), v0 + r < c.vocab_size ? ops::weight_at(one.lm_head, v0 + r, k) : 0.0f);
    }
  }
  // Different seeds, different models; values in the documented ranges.
  const ModelWeights other = random_weights(c, Topology::single(c.n_layers), DeviceContext{}, DType::kF32, 8);
  EXPECT_NE(ops::weight_at(other.layers[0].wq, 0, 0), ops::weight_at(one.layers[0].wq, 0, 0));
  const float bound = 1.0f / std::sqrt(static_cast<float>(c.dim));
  for (int r = 0; r < 64; ++r) EXPECT_LE(std::abs(ops::weight_at(one.layers[1].wk, r, r)), bound);
  EXPECT_NEAR(one.final_norm.as<float>()[3], 1.0f, 0.1f);
}

TEST(RandomWeights, HeldBytesAreKnownBeforeLoading) {
  // run's memory check predicts what the loader will hold, for every stage and dtype, tied or not.
  for (const bool tied : {false, true}) {
    LlamaConfig c = shape_config("tiny");
    c.vocab_size = 501;
    c.tie_word_embeddings = tied;
    for (const DType dtype : {DType::kF32, DType::kBF16})
      for (int rank = 0; rank < 4; ++rank) {
        const Topology t(4, rank, 2, 2, c.n_layers, {});
        EXPECT_EQ(held_weight_bytes(c, t, DeviceContext{}, dtype),
                  random_weights(c, t, DeviceContext{}, dtype, 1).bytes_held)
            << "rank " << rank << " " << dtype_name(dtype) << (tied ? " tied" : "");
      }
  }
}

}  // namespace
}  // namespace tpllama
