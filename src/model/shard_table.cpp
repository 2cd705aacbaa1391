// Shard table construction and the divisibility checks behind it.
#include "model/shard_table.h"

#include <algorithm>

#include "core/error.h"
#include "model/checkpoint.h"

namespace tpllama {

HeadLayout head_layout(const LlamaConfig& c, int tp_size, int tp_rank) {
  if (c.n_heads % tp_size != 0)
    fail("num_attention_heads (", c.n_heads, ") is not divisible by tp (", tp_size, ")");
  if (c.hidden_dim < tp_size)
    fail("intermediate_size (", c.hidden_dim, ") is smaller than tp (", tp_size, ")");
  HeadLayout h;
  h.n_heads_local = c.n_heads / tp_size;
  h.head_begin = tp_rank * h.n_heads_local;
  if (c.n_kv_heads % tp_size == 0) {
    h.n_kv_heads_local = c.n_kv_heads / tp_size;
    h.kv_head_begin = tp_rank * h.n_kv_heads_local;
  } else if (tp_size % c.n_kv_heads == 0) {
    h.n_kv_heads_local = 1;
    h.kv_replication = tp_size / c.n_kv_heads;
    h.kv_head_begin = h.head_begin / (c.n_heads / c.n_kv_heads);
  } else {
    fail("num_key_value_heads (", c.n_kv_heads, ") and tp (", tp_size,
         ") do not divide one another: kv heads can be neither split nor replicated");
  }
  SplitRange ffn = balanced_split(c.hidden_dim, tp_size, tp_rank);
  h.ffn_begin = static_cast<int>(ffn.begin);
  h.ffn_local = static_cast<int>(ffn.count);
  return h;
}

SplitRange balanced_split(int64_t n, int parts, int index) {
  const int64_t base = n / parts, rem = n % parts;
  return {index * base + std::min<int64_t>(index, rem), base + (index < rem ? 1 : 0)};
}

int vocab_local(const LlamaConfig& c, int tp_size) {
  return (c.vocab_size + tp_size - 1) / tp_size;
}

std::vector<ShardEntry> build_shard_table(const LlamaConfig& c, const Topology& topo) {
  const int tp = topo.tp_size();
  const int r = topo.tp_rank();
  const HeadLayout h = head_layout(c, tp, r);
  const int64_t hd = c.head_dim;
  const int64_t vl = vocab_local(c, tp);
  std::vector<ShardEntry> t;
  auto add = [&](std::string name, WeightRole role, int layer, Split split, int64_t rows,
                 int64_t cols, int64_t begin, int64_t count) {
    ShardEntry e;
    e.name = std::move(name);
    e.role = role;
    e.layer = layer;
    e.split = split;
    e.rows = rows;
    e.cols = cols;
    e.begin = begin;
    e.count = count;
    t.push_back(std::move(e));
  };
  auto add_norm = [&](std::string name, WeightRole role, int layer, int64_t size) {
    add(std::move(name), role, layer, Split::kReplicated, size, 1, 0, size);
    t.back().is_1d = true;
    t.back().replica = r > 0;
  };
  auto add_bias = [&](std::string name, WeightRole role, int layer, const ShardEntry& matrix) {
    add(std::move(name), role, layer, Split::kColumn, matrix.rows, 1, matrix.begin, matrix.count);
    t.back().is_1d = true;
    t.back().replica = matrix.replica;
  };
  const bool kv_replica = r % h.kv_replication != 0;
  if (topo.is_first_stage())
    add("model.embed_tokens.weight", WeightRole::kEmbed, -1, Split::kVocab, c.vocab_size, c.dim,
        r * vl, vl);
  for (int l = topo.my_layers().begin; l < topo.my_layers().end; ++l) {
    add_norm(layer_tensor_name(l, "input_layernorm.weight"), WeightRole::kAttnNorm, l, c.dim);
    add(layer_tensor_name(l, "self_attn.q_proj.weight"), WeightRole::kWq, l, Split::kColumn,
        c.q_dim(), c.dim, h.head_begin * hd, h.n_heads_local * hd);
    add(layer_tensor_name(l, "self_attn.k_proj.weight"), WeightRole::kWk, l, Split::kColumn,
        c.kv_dim(), c.dim, h.kv_head_begin * hd, h.n_kv_heads_local * hd);
    t.back().replica = kv_replica;
    add(layer_tensor_name(l, "self_attn.v_proj.weight"), WeightRole::kWv, l, Split::kColumn,
        c.kv_dim(), c.dim, h.kv_head_begin * hd, h.n_kv_heads_local * hd);
    t.back().replica = kv_replica;
    if (c.qkv_bias) {
      const size_t wq = t.size() - 3;
      add_bias(layer_tensor_name(l, "self_attn.q_proj.bias"), WeightRole::kBq, l,
               ShardEntry(t[wq]));
      add_bias(layer_tensor_name(l, "self_attn.k_proj.bias"), WeightRole::kBk, l,
               ShardEntry(t[wq + 1]));
      add_bias(layer_tensor_name(l, "self_attn.v_proj.bias"), WeightRole::kBv, l,
               ShardEntry(t[wq + 2]));
    }
    if (c.qk_norm) {
      add_norm(layer_tensor_name(l, "self_attn.q_norm.weight"), WeightRole::kQNorm, l, hd);
      add_norm(layer_tensor_name(l, "self_attn.k_norm.weight"), WeightRole::kKNorm, l, hd);
    }
    add(layer_tensor_name(l, "self_attn.o_proj.weight"), WeightRole::kWo, l, Split::kRow, c.dim,
        c.q_dim(), h.head_begin * hd, h.n_heads_local * hd);
    add_norm(layer_tensor_name(l, "post_attention_layernorm.weight"), WeightRole::kFfnNorm, l,
             c.dim);
    add(layer_tensor_name(l, "mlp.gate_proj.weight"), WeightRole::kW1, l, Split::kColumn,
        c.hidden_dim, c.dim, h.ffn_begin, h.ffn_local);
    add(layer_tensor_name(l, "mlp.up_proj.weight"), WeightRole::kW3, l, Split::kColumn,
        c.hidden_dim, c.dim, h.ffn_begin, h.ffn_local);
    add(layer_tensor_name(l, "mlp.down_proj.weight"), WeightRole::kW2, l, Split::kRow, c.dim,
        c.hidden_dim, h.ffn_begin, h.ffn_local);
  }
  if (topo.is_last_stage()) {
    add_norm("model.norm.weight", WeightRole::kFinalNorm, -1, c.dim);
    std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    add(head, WeightRole::kLmHead, -1, Split::kVocab, c.vocab_size, c.dim, r * vl, vl);
    t.back().replica =
        c.tie_word_embeddings && topo.pp_size() > 1;  // stage 0 holds it as the embedding
  }
  return t;
}

const char* weight_role_name(WeightRole role) {
  switch (role) {
    case WeightRole::kEmbed:
      return "embed";
    case WeightRole::kAttnNorm:
      return "attn_norm";
    case WeightRole::kWq:
      return "wq";
    case WeightRole::kWk:
      return "wk";
    case WeightRole::kWv:
      return "wv";
    case WeightRole::kBq:
      return "bq";
    case WeightRole::kBk:
      return "bk";
    case WeightRole::kBv:
      return "bv";
    case WeightRole::kQNorm:
      return "q_norm";
    case WeightRole::kKNorm:
      return "k_norm";
    case WeightRole::kWo:
      return "wo";
    case WeightRole::kFfnNorm:
      return "ffn_norm";
    case WeightRole::kW1:
      return "w1";
    case WeightRole::kW3:
      return "w3";
    case WeightRole::kW2:
      return "w2";
    case WeightRole::kFinalNorm:
      return "final_norm";
    case WeightRole::kLmHead:
      return "lm_head";
  }
  return "?";
}

const ShardEntry& find_entry(const std::vector<ShardEntry>& table, WeightRole role, int layer) {
  for (const ShardEntry& e : table)
    if (e.role == role && e.layer == layer) return e;
  fail("the shard table has no ", weight_role_name(role),
       layer >= 0 ? " of layer " + std::to_string(layer) : "", " for this rank");
}

bool stored_quantized(const std::string& name, size_t ndim) {
  return ndim == 2 && name != "model.embed_tokens.weight";
}
bool stored_quantized(const ShardEntry& e) {
  return stored_quantized(e.name, e.is_1d ? 1 : 2);
}

std::string int8_scale_name(const std::string& weight_name) {
  return weight_name + "_scale";
}

ShardEntry int8_scale_entry(const ShardEntry& e, int64_t group_size) {
  ShardEntry s = e;
  s.name = int8_scale_name(e.name);
  s.cols = (e.cols + group_size - 1) / group_size;
  if (e.split == Split::kRow) {
    s.begin = e.begin / group_size;
    s.count = (e.begin + e.count + group_size - 1) / group_size - s.begin;
  }
  return s;
}

}  // namespace tpllama
