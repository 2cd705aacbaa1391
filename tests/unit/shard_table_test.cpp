// The shard table names every weight of a rank by its role (the model field it fills) once, so the
// loader binds weights by role: a table in another order, or one missing an entry, cannot put a
// tensor into the wrong field without a word.
#include <set>
#include <utility>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/shapes.h"
#include "model/shard_table.h"

namespace tpllama {
namespace {

TEST(ShardTable, EveryWeightOfARankIsFoundByItsRoleOnce) {
  LlamaConfig c = shape_config("tiny");  // 4 layers
  for (const auto& [tp, pp] : {std::pair{1, 1}, std::pair{2, 2}}) {
    for (int rank = 0; rank < tp * pp; ++rank) {
      const Topology t(tp * pp, rank, tp, pp, c.n_layers);
      const std::vector<ShardEntry> table = build_shard_table(c, t);
      std::set<std::pair<WeightRole, int>> keys;
      for (const ShardEntry& e : table)
        EXPECT_TRUE(keys.insert({e.role, e.layer}).second) << e.name;
      for (int l = t.my_layers().begin; l < t.my_layers().end; ++l) {
        EXPECT_EQ(find_entry(table, WeightRole::kWq, l).name,
                  layer_tensor_name(l, "self_attn.q_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kWk, l).name,
                  layer_tensor_name(l, "self_attn.k_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kWv, l).name,
                  layer_tensor_name(l, "self_attn.v_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kWo, l).name,
                  layer_tensor_name(l, "self_attn.o_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kW1, l).name,
                  layer_tensor_name(l, "mlp.gate_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kW3, l).name,
                  layer_tensor_name(l, "mlp.up_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kW2, l).name,
                  layer_tensor_name(l, "mlp.down_proj.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kAttnNorm, l).name,
                  layer_tensor_name(l, "input_layernorm.weight"));
        EXPECT_EQ(find_entry(table, WeightRole::kFfnNorm, l).name,
                  layer_tensor_name(l, "post_attention_layernorm.weight"));
      }
      EXPECT_EQ(keys.size(), 9u * static_cast<size_t>(t.my_layers().count()) +
                                 (t.is_first_stage() ? 1 : 0) + (t.is_last_stage() ? 2 : 0));
      if (t.is_first_stage()) {
        EXPECT_EQ(find_entry(table, WeightRole::kEmbed).name, "model.embed_tokens.weight");
      } else {
        EXPECT_THROW(find_entry(table, WeightRole::kEmbed), Error)
            << "rank " << rank << " holds no embedding";
      }
      if (t.is_last_stage()) {
        EXPECT_EQ(find_entry(table, WeightRole::kLmHead).name, "lm_head.weight");
      }
      const int outside = t.my_layers().begin == 0 ? t.my_layers().end % c.n_layers : 0;
      if (outside != t.my_layers().begin) {
        EXPECT_THROW(find_entry(table, WeightRole::kWq, outside), Error);
      }
    }
  }
}

TEST(ShardTable, ATiedHeadIsReadFromTheEmbeddingButBoundAsTheHead) {
  LlamaConfig c = shape_config("tiny");
  c.tie_word_embeddings = true;
  const std::vector<ShardEntry> table = build_shard_table(c, Topology::single(c.n_layers));
  const ShardEntry& embed = find_entry(table, WeightRole::kEmbed);
  const ShardEntry& head = find_entry(table, WeightRole::kLmHead);
  EXPECT_EQ(head.name, embed.name);
  EXPECT_NE(&head, &embed);
  try {
    find_entry(table, WeightRole::kW2, 7);
    FAIL() << "layer 7 of a 4-layer model was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2 of layer 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpllama
