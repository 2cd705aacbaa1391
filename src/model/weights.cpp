// Sharded weight loading: each rank copies only its slice of each tensor out of the mapped files.
#include "model/weights.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tpllama {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Where a rank's slice sits in the tensor as stored: the whole tensor of a Hugging Face
// checkpoint, or exactly the slice (vocab padding included) in a `tpllama shard` file.
struct Source {
  std::vector<int64_t> shape;
  int64_t row_begin = 0;
  int64_t col_begin = 0;
};

int64_t out_rows(const ShardEntry& e) { return e.split == Split::kRow ? e.rows : e.count; }
int64_t out_cols(const ShardEntry& e) { return e.split == Split::kRow ? e.count : e.cols; }

Source source_of(const ShardEntry& e, bool presharded) {
  if (presharded) {
    if (e.is_1d) return {{out_rows(e)}, 0, 0};
    return {{out_rows(e), out_cols(e)}, 0, 0};
  }
  if (e.is_1d) return {{e.rows}, 0, 0};
  return {{e.rows, e.cols}, e.split == Split::kRow ? 0 : e.begin, e.split == Split::kRow ? e.begin : 0};
}

void check_entry(const Checkpoint& ckpt, const ShardEntry& e) {
  const TensorInfo& t = ckpt.info(e.name);
  const std::string& file = ckpt.file_of(e.name).path();
  const Source src = source_of(e, ckpt.presharded());
  if (t.shape != src.shape)
    fail(file, ": tensor '", e.name, "' has shape ", shape_text(t.shape), " but ",
         ckpt.presharded() ? "this rank's slice should be " : "config.json implies ", shape_text(src.shape));
  if (t.dtype == DType::kI32) fail(file, ": tensor '", e.name, "' has dtype I32; weights must be F32, F16 or BF16");
}

// Copies this rank's slice of one tensor into a new f32 buffer.
Tensor load_entry(const Checkpoint& ckpt, const ShardEntry& e, ModelWeights* w) {
  const SafetensorsFile& file = ckpt.file_of(e.name);
  const TensorInfo& t = file.info(e.name);
  const Source src = source_of(e, ckpt.presharded());
  const int64_t src_cols = src.shape.size() == 2 ? src.shape[1] : 1;
  const size_t es = dtype_size(t.dtype);
  const int64_t rows = out_rows(e), cols = out_cols(e);
  // The last vocab shard is padded with zero rows past vocab_size.
  const int64_t present = e.split == Split::kVocab ? std::clamp<int64_t>(e.rows - e.begin, 0, rows) : rows;
  Buffer buf(static_cast<size_t>(rows * cols) * sizeof(float));
  auto* dst = static_cast<float*>(buf.data());
  for (int64_t r = 0; r < present; ++r)
    convert_to_f32(file.data(t) + static_cast<size_t>((src.row_begin + r) * src_cols + src.col_begin) * es, t.dtype,
                   static_cast<size_t>(cols), dst + r * cols);
  std::memset(dst + present * cols, 0, static_cast<size_t>((rows - present) * cols) * sizeof(float));
  const uint64_t elements = static_cast<uint64_t>(present * cols);
  w->bytes_read += elements * es;
  (e.replica ? w->elements_replicated : w->elements_unique) += elements;
  w->bytes_held += buf.nbytes();
  Tensor view = e.is_1d ? buf.view(DType::kF32, {rows}) : buf.view(DType::kF32, {rows, cols});
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
