// The shard table: every weight of the model listed once with how it is split across the TP
// group. Loading slices by this table; a rank holds only its layers and its slice of each tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "parallel/topology.h"

namespace tpllama {

enum class Split {
  kReplicated,  // every TP rank holds the whole tensor (norms)
  kColumn,      // rows of [out][in] split: q/k/v, gate/up (output features)
  kRow,         // columns of [out][in] split: o_proj, down_proj (input features)
  kVocab,       // rows of [vocab][dim] split with zero padding: embedding, lm_head
};

// Which heads this TP rank owns. When tp > n_kv_heads, kv heads are replicated so each rank holds
// the one its query heads read.
struct HeadLayout {
  int n_heads_local = 0;
  int n_kv_heads_local = 0;
  int head_begin = 0;
  int kv_head_begin = 0;
  int kv_replication = 1;  // how many ranks hold each kv head
  int ffn_begin = 0;       // this rank's slice of the FFN width (intermediate_size)
  int ffn_local = 0;
};

// Balanced split of n items over `parts`: the first n % parts parts get one more.
struct SplitRange {
  int64_t begin = 0;
  int64_t count = 0;
};
SplitRange balanced_split(int64_t n, int parts, int index);

// Throws with the numbers when heads or kv-heads do not divide by tp (the FFN width may split
// unevenly).
HeadLayout head_layout(const LlamaConfig& config, int tp_size, int tp_rank);
// Vocabulary rows per TP rank (the last one is padded when vocab_size does not divide).
int vocab_local(const LlamaConfig& config, int tp_size);

// The field of the model a weight fills, whatever the checkpoint calls it (a tied head is read from
// the embedding's tensor): weights are bound to fields by role, never by their place in the table.
enum class WeightRole {
  kEmbed,
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kBq,     // q_proj's bias (Qwen2), split with q_proj's rows
  kBk,     // k_proj's bias
  kBv,     // v_proj's bias
  kQNorm,  // q_norm (Qwen3): one (head_dim) weight every head shares
  kKNorm,  // k_norm
  kWo,
  kFfnNorm,
  kW1,
  kW3,
  kW2,
  kFinalNorm,
  kLmHead
};
const char* weight_role_name(WeightRole role);

struct ShardEntry {
  std::string name;  // HF tensor name (where it is read)
  WeightRole role = WeightRole::kEmbed;
  int layer = -1;  // the layer of a per-layer weight (model numbering), else -1
  Split split = Split::kReplicated;
  int64_t rows = 0;  // full shape [rows][cols]; 1-D tensors have cols == 1
  int64_t cols = 1;
  int64_t begin = 0;  // this rank's slice along the split axis (rows, or cols for kRow)
  int64_t count = 0;  // rows/cols held, including zero padding for kVocab
  bool is_1d = false;
  bool replica =
      false;  // another rank holds the same slice too (norms, replicated kv heads, tied head)
};

// The entries this rank holds: embed (first stage), per layer of the stage attn_norm, wq, wk, wv,
// (bq, bk, bv with qkv_bias; q_norm, k_norm with qk_norm), wo, ffn_norm, w1, w3, w2, then
// final_norm and lm_head (last stage), each (role, layer) once. A bias is 1-D and split like its
// matrix's rows (kColumn); norms are kReplicated.
std::vector<ShardEntry> build_shard_table(const LlamaConfig& config, const Topology& topology);

// The entry of (role, layer) in a rank's table; fails naming it when there is none.
const ShardEntry& find_entry(const std::vector<ShardEntry>& table, WeightRole role, int layer = -1);

// An int8 checkpoint (config.h's kInt8QuantMethod) stores every matrix but the embedding quantized;
// a tied head is the embedding's tensor, so it stays as stored (and is quantized at load).
bool stored_quantized(const ShardEntry& entry);
bool stored_quantized(const std::string& name, size_t ndim);
std::string int8_scale_name(const std::string& weight_name);
// The entry of `<name>_scale` that goes with entry e of a quantized matrix: the same rows (and
// split), its columns the groups of group_size columns e's slice falls in.
ShardEntry int8_scale_entry(const ShardEntry& e, int64_t group_size);

}  // namespace tpllama
