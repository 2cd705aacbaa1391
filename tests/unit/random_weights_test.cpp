// Random weights are one model whatever the layout: every TP/PP slice holds exactly the elements
// of the one-rank model at the positions the shard table names.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/shapes.h"
#include "model/shard_table.h"
#include "model/weights.h"

namespace tpllama {
namespace {

TEST(RandomWeights, SlicesOfEveryLayoutAreTheOneRankModel) {
  LlamaConfig c = shape_config("tiny");
  c.vocab_size = 501;  // uneven over 2 ranks: the last vocab shard is padded
  const ModelWeights one =
      random_weights(c, Topology::single(c.n_layers), DeviceContext{}, DType::kF32, 7);
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
        for (int k = 0; k < c.dim; k += 5)
          ASSERT_EQ(ops::weight_at(p.wq, r, k), ops::weight_at(o.wq, q0 + r, k));
      for (int r = 0; r < c.dim; r += 7)  // row-parallel: columns of the full matrix
        for (int k = 0; k < p.w2.cols; k += 5)
          ASSERT_EQ(ops::weight_at(p.w2, r, k), ops::weight_at(o.w2, r, h.ffn_begin + k));
      for (int i = 0; i < c.dim; ++i)
        ASSERT_EQ(p.attn_norm.as<float>()[i], o.attn_norm.as<float>()[i]);
    }
    if (t.is_last_stage()) {
      const int vl = vocab_local(c, 2), v0 = t.tp_rank() * vl;
      for (int r = 0; r < vl; r += 3)
        for (int k = 0; k < c.dim; k += 11)
          ASSERT_EQ(ops::weight_at(part.lm_head, r, k),
                    v0 + r < c.vocab_size ? ops::weight_at(one.lm_head, v0 + r, k) : 0.0f);
    }
  }
  // Different seeds, different models; values in the documented ranges.
  const ModelWeights other =
      random_weights(c, Topology::single(c.n_layers), DeviceContext{}, DType::kF32, 8);
  EXPECT_NE(ops::weight_at(other.layers[0].wq, 0, 0), ops::weight_at(one.layers[0].wq, 0, 0));
  const float bound = 1.0f / std::sqrt(static_cast<float>(c.dim));
  for (int r = 0; r < 64; ++r) EXPECT_LE(std::abs(ops::weight_at(one.layers[1].wk, r, r)), bound);
  EXPECT_NEAR(one.final_norm.as<float>()[3], 1.0f, 0.1f);
}

TEST(RandomWeights, TiedHeadIsTheEmbeddingAndCountedOnce) {
  LlamaConfig c = shape_config("tiny");
  c.vocab_size = 501;
  c.tie_word_embeddings = true;
  uint64_t unique = 0, replicated = 0;
  for (int rank = 0; rank < 2;
       ++rank) {  // tp 2, one stage: each rank packs its embedding slice as its head
    const Topology t(2, rank, 2, 1, c.n_layers, {});
    const ModelWeights w = random_weights(c, t, DeviceContext{}, DType::kF32, 3);
    for (int r = 0; r < w.lm_head.rows; r += 5)
      for (int k = 0; k < c.dim; k += 3)
        ASSERT_EQ(ops::weight_at(w.lm_head, r, k), w.embed.as<float>()[r * c.dim + k])
            << "rank " << rank << " row " << r;
    unique += w.elements_unique;
    replicated += w.elements_replicated;
  }
  const ModelWeights one =
      random_weights(c, Topology::single(c.n_layers), DeviceContext{}, DType::kF32, 3);
  EXPECT_EQ(unique, one.elements_unique);
  const uint64_t per_layer =
      static_cast<uint64_t>(2 * c.dim) +  // the two norms, on both ranks
      static_cast<uint64_t>(c.dim) * (c.n_heads + 2 * c.n_kv_heads + c.n_heads) * c.head_dim +
      static_cast<uint64_t>(3) * c.dim * c.hidden_dim;
  EXPECT_EQ(one.elements_unique + one.elements_replicated,
            static_cast<uint64_t>(c.vocab_size) * c.dim + c.n_layers * per_layer + c.dim);
  EXPECT_GT(replicated, 0u);  // the norms
}

TEST(RandomWeights, FillIsTheDocumentedFormula) {
  // ops::UniformFill against its definition, computed here from splitmix64's published constants.
  auto splitmix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  ops::UniformFill f;
  f.stream = 12345;
  f.full_cols = 50;
  f.row0 = 3;
  f.col0 = 7;
  f.present = 4;
  f.scale = 0.25f;
  f.offset = 1.0f;
  std::vector<float> out(5 * 9, -1.0f);
  ops::fill_uniform(DeviceContext{}, Tensor(out.data(), DType::kF32, {5, 9}), f);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 9; ++c) {
      float expected = 0.0f;  // rows from `present` on
      if (r < 4) {
        const uint64_t z = splitmix(12345 + static_cast<uint64_t>((3 + r) * 50 + 7 + c));
        const double u = static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        expected = std::fma(0.25f, static_cast<float>(u), 1.0f);
        ASSERT_GE(u, -1.0);
        ASSERT_LT(u, 1.0);
      }
      ASSERT_EQ(out[static_cast<size_t>(r * 9 + c)], expected) << "row " << r << " col " << c;
    }
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
