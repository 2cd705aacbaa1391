// Sharded weight loading: each rank copies only its slice of each tensor out of the mapped files.
#include "model/weights.h"

#include <cstring>

#include "core/error.h"

namespace tpllama {
namespace {

void check_entry(const Checkpoint& ckpt, const ShardEntry& e) {
  const TensorInfo& t = ckpt.info(e.name);
  const std::string& file = ckpt.file_of(e.name).path();
  std::vector<int64_t> expected = e.is_1d ? std::vector<int64_t>{e.rows} : std::vector<int64_t>{e.rows, e.cols};
  if (t.shape != expected) {
    auto str = [](const std::vector<int64_t>& s) {
      std::string out = "[";
      for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
      return out + "]";
    };
    fail(file, ": tensor '", e.name, "' has shape ", str(t.shape), " but config.json implies ", str(expected));
  }
  if (t.dtype == DType::kI32)
    fail(file, ": tensor '", e.name, "' has dtype I32; weights must be F32, F16 or BF16");
}

// Copies this rank's slice of one tensor into a new f32 buffer.
Tensor load_entry(const Checkpoint& ckpt, const ShardEntry& e, ModelWeights* w) {
  const SafetensorsFile& file = ckpt.file_of(e.name);
  const TensorInfo& t = file.info(e.name);
  const uint8_t* src = file.data(t);
  const size_t es = dtype_size(t.dtype);
  const int64_t out_rows = e.split == Split::kRow ? e.rows : e.count;
  const int64_t out_cols = e.split == Split::kRow ? e.count : e.cols;
  Buffer buf(static_cast<size_t>(out_rows * out_cols) * sizeof(float));
  auto* dst = static_cast<float*>(buf.data());
  if (e.split == Split::kRow) {
    for (int64_t r = 0; r < e.rows; ++r)
      convert_to_f32(src + static_cast<size_t>(r * e.cols + e.begin) * es, t.dtype,
                     static_cast<size_t>(e.count), dst + r * e.count);
    w->bytes_read += static_cast<uint64_t>(e.rows * e.count) * es;
    (e.replica ? w->elements_replicated : w->elements_unique) += static_cast<uint64_t>(e.rows * e.count);
  } else {
    int64_t present = std::min(e.count, e.rows - e.begin);  // kVocab pads the last rank
    if (present < 0) present = 0;
    convert_to_f32(src + static_cast<size_t>(e.begin * e.cols) * es, t.dtype,
                   static_cast<size_t>(present * e.cols), dst);
    std::memset(dst + present * e.cols, 0, static_cast<size_t>((e.count - present) * e.cols) * sizeof(float));
    w->bytes_read += static_cast<uint64_t>(present * e.cols) * es;
    (e.replica ? w->elements_replicated : w->elements_unique) += static_cast<uint64_t>(present * e.cols);
  }
  w->bytes_held += buf.nbytes();
  Tensor view = e.is_1d ? buf.view(DType::kF32, {out_rows}) : buf.view(DType::kF32, {out_rows, out_cols});
  w->storage.push_back(std::move(buf));
  return view;
}

}  // namespace

ModelWeights load_weights(const Checkpoint& ckpt, const Topology& topo) {
  const LlamaConfig& c = ckpt.config();
  std::vector<ShardEntry> table = build_shard_table(c, topo);
  for (const ShardEntry& e : table) check_entry(ckpt, e);

  ModelWeights w;
  size_t i = 0;
  if (topo.is_first_stage()) w.embed = load_entry(ckpt, table[i++], &w);
  for (int l = topo.my_layers().begin; l < topo.my_layers().end; ++l) {
    LayerWeights lw;
    lw.attn_norm = load_entry(ckpt, table[i++], &w);
    lw.wq = load_entry(ckpt, table[i++], &w);
    lw.wk = load_entry(ckpt, table[i++], &w);
    lw.wv = load_entry(ckpt, table[i++], &w);
    lw.wo = load_entry(ckpt, table[i++], &w);
    lw.ffn_norm = load_entry(ckpt, table[i++], &w);
    lw.w1 = load_entry(ckpt, table[i++], &w);
    lw.w3 = load_entry(ckpt, table[i++], &w);
    lw.w2 = load_entry(ckpt, table[i++], &w);
    w.layers.push_back(lw);
  }
  if (topo.is_last_stage()) {
    w.final_norm = load_entry(ckpt, table[i++], &w);
    const ShardEntry& head = table[i++];
    if (c.tie_word_embeddings && !w.embed.empty())
      w.lm_head = w.embed;  // same slice of the same tensor: hold it once
    else
      w.lm_head = load_entry(ckpt, head, &w);
  }
  TPLLAMA_CHECK(i == table.size(), "shard table has ", table.size(), " entries, loaded ", i);
  return w;
}

}  // namespace tpllama
