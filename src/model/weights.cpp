// Sharded weight loading: each rank copies only its slice of each tensor out of the mapped files
// (or draws it from the seeded generator), then packs matrices for ops::matmul.
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/random.h"
#include "ops/device.h"
#include "ops/weight.h"

namespace tpllama {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t out_rows(const ShardEntry& e) {
  return e.split == Split::kRow ? e.rows : e.count;
}
int64_t out_cols(const ShardEntry& e) {
  return e.split == Split::kRow ? e.count : e.cols;
}
// Rows of the slice that exist in the tensor: the last vocab shard is padded past vocab_size.
int64_t present_rows(const ShardEntry& e) {
  return e.split == Split::kVocab ? std::clamp<int64_t>(e.rows - e.begin, 0, e.count) : out_rows(e);
}
// Where the slice starts in the full tensor.
int64_t full_row_begin(const ShardEntry& e) {
  return e.split == Split::kRow ? 0 : e.begin;  // a norm's begin is 0, a bias's its rows'
}
int64_t full_col_begin(const ShardEntry& e) {
  return e.split == Split::kRow ? e.begin : 0;
}

// Where a rank's slice sits in the tensor as stored: the whole tensor of a Hugging Face
// checkpoint, or exactly the slice (vocab padding included) in a `tpllama shard` file.
struct Source {
  std::vector<int64_t> shape;
  int64_t row_begin = 0;
  int64_t col_begin = 0;
};

Source source_of(const ShardEntry& e, bool presharded) {
  if (presharded) {
    if (e.is_1d) return {{out_rows(e)}, 0, 0};
    return {{out_rows(e), out_cols(e)}, 0, 0};
  }
  if (e.is_1d) return {{e.rows}, full_row_begin(e), 0};
  return {{e.rows, e.cols}, full_row_begin(e), full_col_begin(e)};
}

void check_shape(const Checkpoint& ckpt, const ShardEntry& e) {
  const TensorInfo& t = ckpt.info(e.name);
  const Source src = source_of(e, ckpt.presharded());
  if (t.shape != src.shape)
    fail(ckpt.file_of(e.name).path(), ": tensor '", e.name, "' has shape ", shape_text(t.shape),
         " but ", ckpt.presharded() ? "this rank's slice should be " : "config.json implies ",
         shape_text(src.shape));
}

// An I8 tensor is an int8 checkpoint's matrix: declared by config.json, never the embedding or a
// norm, and with F32 scales of its shape beside it.
void check_int8_entry(const Checkpoint& ckpt, const ShardEntry& e) {
  const std::string& file = ckpt.file_of(e.name).path();
  if (!stored_quantized(e))
    fail(file, ": tensor '", e.name,
         "' is I8, but only weight matrices other than the embedding may be int8 ",
         "(norms and the embedding are read as f32)");
  if (ckpt.config().int8_group_size == 0)
    fail(file, ": tensor '", e.name, "' is I8, but ", ckpt.dir(),
         "/config.json has no quantization_config ", "(quant_method '", kInt8QuantMethod,
         "') that says how its scales are laid out");
  const std::string scale = int8_scale_name(e.name);
  if (!ckpt.contains(scale))
    fail(file, ": int8 tensor '", e.name, "' has no scales: '", scale, "' is missing from ",
         ckpt.dir());
  if (ckpt.info(scale).dtype != DType::kF32)
    fail(ckpt.file_of(scale).path(), ": '", scale, "' has dtype ",
         safetensors_dtype_name(ckpt.info(scale).dtype), "; int8 scales are F32");
  check_shape(ckpt, int8_scale_entry(e, ops::int8_group_size()));
}

void check_entry(const Checkpoint& ckpt, const ShardEntry& e) {
  check_shape(ckpt, e);
  const TensorInfo& t = ckpt.info(e.name);
  if (t.dtype == DType::kI8) return check_int8_entry(ckpt, e);
  if (t.dtype == DType::kI32)
    fail(ckpt.file_of(e.name).path(), ": tensor '", e.name, "' has dtype ",
         safetensors_dtype_name(t.dtype),
         "; weights must be F32, F16 or BF16 (or I8 in an int8 checkpoint)");
}

// The rows of a rank's slice of entry e as the checkpoint stores them (found once per tensor).
struct SourceRows {
  const uint8_t* first = nullptr;
  size_t stride = 0;  // bytes from one row to the next
  const uint8_t* row(int64_t r) const { return first + static_cast<size_t>(r) * stride; }
};
SourceRows source_rows(const Checkpoint& ckpt, const ShardEntry& e) {
  const SafetensorsFile& file = ckpt.file_of(e.name);
  const TensorInfo& t = file.info(e.name);
  const Source src = source_of(e, ckpt.presharded());
  const int64_t src_cols = src.shape.size() == 2 ? src.shape[1] : 1;
  const size_t es = dtype_size(t.dtype);
  return {file.data(t) + static_cast<size_t>(src.row_begin * src_cols + src.col_begin) * es,
          static_cast<size_t>(src_cols) * es};
}

// How a rank holds an entry of its shard table: as it is in f32 (norms, and the embedding table)
// or packed for matmul (every matrix, the head included, tied or not).
bool held_plain(const ShardEntry& e) {
  return e.is_1d || e.role == WeightRole::kEmbed;
}

// Fills the present rows of a rank's slice (out_rows × out_cols, row-major f32); returns the
// source bytes it read.
using SliceFiller = std::function<uint64_t(const ShardEntry&, float*)>;
// Or: the seeded values of an entry (random weights), drawn where they are held, in the dtype
// they are held in, with no host copy.
using UniformSpec = std::function<ops::UniformFill(const ShardEntry&)>;
// Or, for the matrices an int8 checkpoint stores quantized (`stored`), their q (out_rows ×
// out_cols) and scales (out_rows × int8_scale_cols(out_cols)) as stored, packed as they are when
// the run holds int8: no f32 pass, and the same bytes as quantizing the original at load.
struct Int8Source {
  std::function<bool(const ShardEntry&)> stored;
  std::function<uint64_t(const ShardEntry&, int8_t* q, float* scales)> fill;
};

class WeightBuilder {
 public:
  WeightBuilder(const DeviceContext& ctx, DType dtype, SliceFiller fill, UniformSpec uniform,
                Int8Source int8, ModelWeights* w)
      : ctx_(ctx),
        dtype_(dtype),
        fill_(std::move(fill)),
        uniform_(std::move(uniform)),
        int8_(std::move(int8)),
        w_(w) {}

  // The slice as f32 (held_plain entries), on the device. keep_host: also return the host copy
  // (a tied head packs it; not made for seeded values, which tied_head draws again).
  Tensor plain(const ShardEntry& e, Tensor* keep_host = nullptr) {
    if (uniform_) {
      count(e);
      Buffer buf =
          ops::allocate(ctx_, static_cast<size_t>(out_rows(e) * out_cols(e)) * sizeof(float));
      const Tensor t = e.is_1d ? buf.view(DType::kF32, {out_rows(e)})
                               : buf.view(DType::kF32, {out_rows(e), out_cols(e)});
      ops::fill_uniform(ctx_, t, uniform_(e));
      w_->bytes_held += buf.nbytes();
      w_->storage.push_back(std::move(buf));
      return t;
    }
    Buffer host = slice(e);
    Tensor view = e.is_1d ? host.view(DType::kF32, {out_rows(e)})
                          : host.view(DType::kF32, {out_rows(e), out_cols(e)});
    w_->bytes_held += host.nbytes();
    if (keep_host != nullptr) *keep_host = view;
    if (ctx_.device == Device::kCpu) {
      w_->storage.push_back(std::move(host));
      return view;
    }
    Buffer device = ops::allocate(ctx_, host.nbytes());
    Tensor on_device = e.is_1d ? device.view(DType::kF32, {out_rows(e)})
                               : device.view(DType::kF32, {out_rows(e), out_cols(e)});
    ops::upload(ctx_, on_device, host.data());
    w_->storage.push_back(std::move(device));
    if (keep_host != nullptr)
      w_->storage.push_back(std::move(host));  // freed with the rest after load
    return on_device;
  }

  // The slice packed for matmul in the run's dtype.
  ops::Weight matrix(const ShardEntry& e) {
    if (uniform_) {
      count(e);
      return drawn(e);
    }
    if (dtype_ == DType::kI8 && int8_.stored && int8_.stored(e)) return quantized(e);
    return pack(slice(e).view(DType::kF32, {out_rows(e), out_cols(e)}));
  }

  // A tied head on the embedding's stage: the embedding's slice (e names it) packed a second time;
  // its elements are counted once, with the embedding.
  ops::Weight tied_head(const ShardEntry& e, Tensor embed_host) {
    return uniform_ ? drawn(e) : pack(embed_host);
  }

  // f32: host memory.
  ops::Weight pack(Tensor f32) {
    Buffer packed = ops::allocate(ctx_, ops::weight_bytes(ctx_, f32.size(0), f32.size(1), dtype_));
    ops::Weight weight = ops::pack_weight(ctx_, f32, dtype_, packed.data());
    return hold(std::move(packed), weight);
  }

 private:
  ops::Weight drawn(const ShardEntry& e) {
    Buffer packed = ops::allocate(ctx_, ops::weight_bytes(ctx_, out_rows(e), out_cols(e), dtype_));
    ops::Weight weight = ops::fill_weight_uniform(ctx_, out_rows(e), out_cols(e), dtype_,
                                                  uniform_(e), packed.data());
    return hold(std::move(packed), weight);
  }

  ops::Weight quantized(const ShardEntry& e) {
    const int64_t rows = out_rows(e), cols = out_cols(e);
    std::vector<int8_t> q(static_cast<size_t>(rows * cols), 0);  // zeros: vocab padding
    std::vector<float> scales(static_cast<size_t>(rows * ops::int8_scale_cols(cols)), 0.0f);
    w_->bytes_read += int8_.fill(e, q.data(), scales.data());
    count(e);
    Buffer packed = ops::allocate(ctx_, ops::weight_bytes(ctx_, rows, cols, DType::kI8));
    ops::Weight weight =
        ops::pack_int8_weight(ctx_, q.data(), scales.data(), rows, cols, packed.data());
    return hold(std::move(packed), weight);
  }

  ops::Weight hold(Buffer packed, ops::Weight weight) {
    w_->bytes_held += packed.nbytes();
    w_->matrix_bytes += packed.nbytes();
    w_->storage.push_back(std::move(packed));
    return weight;
  }

  void count(const ShardEntry& e) {
    const uint64_t elements = static_cast<uint64_t>(present_rows(e) * out_cols(e));
    (e.replica ? w_->elements_replicated : w_->elements_unique) += elements;
  }

  Buffer slice(const ShardEntry& e) {
    const int64_t rows = out_rows(e), cols = out_cols(e), present = present_rows(e);
    Buffer buf(static_cast<size_t>(rows * cols) * sizeof(float));
    auto* dst = static_cast<float*>(buf.data());
    w_->bytes_read += fill_(e, dst);
    std::memset(dst + present * cols, 0,
                static_cast<size_t>((rows - present) * cols) * sizeof(float));
    count(e);
    return buf;
  }

  DeviceContext ctx_;
  DType dtype_;
  SliceFiller fill_;
  UniformSpec uniform_;
  Int8Source int8_;
  ModelWeights* w_;
};

ModelWeights build_weights(const LlamaConfig& c, const Topology& topo, const DeviceContext& ctx,
                           DType dtype, SliceFiller fill, UniformSpec uniform = nullptr,
                           Int8Source int8 = {}) {
  TPLLAMA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 ||
                    (dtype == DType::kI8 && ctx.device == Device::kCpu),
                "weights are held as f32 or bf16 (or int8 on the CPU), not ", dtype_name(dtype));
  if (dtype == DType::kI8) check_int8_slices(c, topo);  // every layout must hold the same numbers
  const std::vector<ShardEntry> table = build_shard_table(c, topo);
  ModelWeights w;
  WeightBuilder b(ctx, dtype, std::move(fill), std::move(uniform), std::move(int8), &w);
  std::set<const ShardEntry*> bound;  // every entry is bound to a field, each once
  auto entry = [&](WeightRole role, int layer = -1) -> const ShardEntry& {
    const ShardEntry& e = find_entry(table, role, layer);
    TPLLAMA_CHECK(bound.insert(&e).second, "shard table entry ", e.name, " bound twice");
    return e;
  };
  Tensor embed_host;  // a tied head packs the embedding's slice as read
  if (topo.is_first_stage()) w.embed = b.plain(entry(WeightRole::kEmbed), &embed_host);
  for (int l = topo.my_layers().begin; l < topo.my_layers().end; ++l) {
    LayerWeights lw;
    lw.attn_norm = b.plain(entry(WeightRole::kAttnNorm, l));
    lw.wq = b.matrix(entry(WeightRole::kWq, l));
    lw.wk = b.matrix(entry(WeightRole::kWk, l));
    lw.wv = b.matrix(entry(WeightRole::kWv, l));
    if (c.qkv_bias) {
      lw.bq = b.plain(entry(WeightRole::kBq, l));
      lw.bk = b.plain(entry(WeightRole::kBk, l));
      lw.bv = b.plain(entry(WeightRole::kBv, l));
    }
    if (c.qk_norm) {
      lw.q_norm = b.plain(entry(WeightRole::kQNorm, l));
      lw.k_norm = b.plain(entry(WeightRole::kKNorm, l));
    }
    lw.wo = b.matrix(entry(WeightRole::kWo, l));
    lw.ffn_norm = b.plain(entry(WeightRole::kFfnNorm, l));
    lw.w1 = b.matrix(entry(WeightRole::kW1, l));
    lw.w3 = b.matrix(entry(WeightRole::kW3, l));
    lw.w2 = b.matrix(entry(WeightRole::kW2, l));
    w.layers.push_back(lw);
  }
  if (topo.is_last_stage()) {
    w.final_norm = b.plain(entry(WeightRole::kFinalNorm));
    const ShardEntry& head = entry(WeightRole::kLmHead);
    // A tied head is the embedding's slice, read once and packed as a second copy for matmul.
    w.lm_head =
        c.tie_word_embeddings && !w.embed.empty() ? b.tied_head(head, embed_host) : b.matrix(head);
  }
  if (ctx.device !=
      Device::kCpu) {  // the host copies kept for a tied head go; only device memory stays
    std::vector<Buffer> kept;
    for (Buffer& buffer : w.storage)
      if (buffer.device() == ctx.device) kept.push_back(std::move(buffer));
    w.storage = std::move(kept);
  }
  TPLLAMA_CHECK(bound.size() == table.size(), "shard table has ", table.size(), " entries, bound ",
                bound.size());
  return w;
}

}  // namespace

void check_int8_slices(const LlamaConfig& config, const Topology& topology, const std::string& held,
                       const std::string& otherwise) {
  const int64_t group = ops::int8_group_size();
  for (const ShardEntry& e : build_shard_table(config, topology)) {
    if (e.split != Split::kRow ||
        (e.begin % group == 0 && (e.count % group == 0 || e.begin + e.count == e.cols)))
      continue;
    fail(held, " quantizes ", e.name, " per group of ", group, " of its ", e.cols,
         " columns (input features), but --tp ", topology.tp_size(), " gives rank ",
         topology.rank(), " columns ", e.begin, " to ", e.begin + e.count - 1,
         ", which cut a group: int8 needs a TP size that splits ", e.cols, " into whole groups of ",
         group, " (--tp 1 always does), or ", otherwise);
  }
}

uint64_t held_weight_bytes(const LlamaConfig& c, const Topology& topo, const DeviceContext& ctx,
                           DType dtype) {
  uint64_t bytes = 0;
  for (const ShardEntry& e : build_shard_table(c, topo)) {
    bytes += held_plain(e) ? static_cast<uint64_t>(out_rows(e) * out_cols(e)) * sizeof(float)
                           : ops::weight_bytes(ctx, out_rows(e), out_cols(e), dtype);
  }
  return bytes;
}

namespace {

// A NaN or Inf weight poisons every logit it reaches (greedy text falls to token 0, scores to
// null), so each rank refuses one in the row it has just converted, while the row is still in
// cache: the check costs no second pass over the file. The message places the element in the
// tensor as the checkpoint stores it whole.
void check_finite_row(const std::string& file, const ShardEntry& e, int64_t r, const float* row,
                      int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    if (std::isfinite(row[c])) continue;
    const int64_t full_row = full_row_begin(e) + r, full_col = full_col_begin(e) + c;
    const char* what = std::isnan(row[c]) ? "NaN" : row[c] > 0 ? "+Inf" : "-Inf";
    if (e.is_1d)
      fail(file, ": ", e.name, " element ", full_row, " is ", what, "; the checkpoint is damaged");
    fail(file, ": ", e.name, " element ", full_row * e.cols + full_col, " (row ", full_row,
         ", column ", full_col, ") is ", what, "; the checkpoint is damaged");
  }
}

}  // namespace

void check_checkpoint_tensors(const Checkpoint& ckpt, const Topology& topo) {
  for (const ShardEntry& e : build_shard_table(ckpt.config(), topo)) check_entry(ckpt, e);
}

ModelWeights load_weights(const Checkpoint& ckpt, const Topology& topo, const DeviceContext& ctx,
                          DType dtype) {
  check_checkpoint_tensors(ckpt, topo);
  const int64_t group = ops::int8_group_size();
  auto is_int8 = [&ckpt](const ShardEntry& e) { return ckpt.info(e.name).dtype == DType::kI8; };
  // f32 rows: converted from f32 / f16 / bf16, or an int8 matrix's q × scale (a run holding f32 or
  // bf16).
  auto fill = [&ckpt, is_int8, group](const ShardEntry& e, float* dst) -> uint64_t {
    const std::string& path = ckpt.file_of(e.name).path();
    const DType stored = ckpt.info(e.name).dtype;
    const int64_t cols = out_cols(e), present = present_rows(e);
    const ShardEntry s = is_int8(e) ? int8_scale_entry(e, group) : ShardEntry{};
    const SourceRows rows = source_rows(ckpt, e),
                     scale_rows = is_int8(e) ? source_rows(ckpt, s) : SourceRows{};
    const std::string scale_rows_file = is_int8(e) ? ckpt.file_of(s.name).path() : std::string();
    for (int64_t r = 0; r < present; ++r) {
      float* row = dst + r * cols;
      if (stored == DType::kI8) {
        const auto* q = reinterpret_cast<const int8_t*>(rows.row(r));
        const auto* scales = reinterpret_cast<const float*>(scale_rows.row(r));
        check_finite_row(scale_rows_file, s, r, scales, out_cols(s));
        for (int64_t c = 0; c < cols; ++c)
          row[c] = static_cast<float>(q[c]) *
                   scales[(full_col_begin(e) + c) / group - full_col_begin(s)];
      } else {
        convert_to_f32(rows.row(r), stored, static_cast<size_t>(cols), row);
      }
      check_finite_row(path, e, r, row, cols);
    }
    const uint64_t scale_bytes =
        stored == DType::kI8 ? static_cast<uint64_t>(present * out_cols(s)) * sizeof(float) : 0;
    return static_cast<uint64_t>(present * cols) * dtype_size(stored) + scale_bytes;
  };
  // An int8 run of an int8 checkpoint: q and scales as stored.
  auto fill_int8 = [&ckpt, group](const ShardEntry& e, int8_t* q, float* scales) -> uint64_t {
    const ShardEntry s = int8_scale_entry(e, group);
    const int64_t cols = out_cols(e), groups = out_cols(s), present = present_rows(e);
    TPLLAMA_CHECK(groups == ops::int8_scale_cols(cols), e.name, ": a slice of ", cols,
                  " columns cuts a group");
    const SourceRows q_rows = source_rows(ckpt, e), scale_rows = source_rows(ckpt, s);
    const std::string& scale_file = ckpt.file_of(s.name).path();
    for (int64_t r = 0; r < present; ++r) {
      std::memcpy(q + r * cols, q_rows.row(r), static_cast<size_t>(cols));
      std::memcpy(scales + r * groups, scale_rows.row(r),
                  static_cast<size_t>(groups) * sizeof(float));
      check_finite_row(scale_file, s, r, scales + r * groups, groups);
    }
    return static_cast<uint64_t>(present * (cols + groups * static_cast<int64_t>(sizeof(float))));
  };
  return build_weights(ckpt.config(), topo, ctx, dtype, fill, nullptr,
                       Int8Source{is_int8, fill_int8});
}

ModelWeights random_weights(const LlamaConfig& config, const Topology& topo,
                            const DeviceContext& ctx, DType dtype, uint64_t seed) {
  config.validate();
  auto spec = [seed](const ShardEntry& e) {
    ops::UniformFill f;
    f.stream = splitmix64(seed);
    for (char ch : e.name) f.stream = splitmix64(f.stream ^ static_cast<uint8_t>(ch));
    const bool is_bias =
        e.role == WeightRole::kBq || e.role == WeightRole::kBk || e.role == WeightRole::kBv;
    const bool is_norm = e.is_1d && !is_bias, is_embed = e.name == "model.embed_tokens.weight";
    f.scale = is_norm || is_bias ? 0.1f
              : is_embed         ? 1.0f
                                 : 1.0f / std::sqrt(static_cast<float>(e.cols));
    f.offset = is_norm ? 1.0f : 0.0f;
    f.full_cols = e.cols;
    f.row0 = full_row_begin(e);
    f.col0 = full_col_begin(e);
    f.present = present_rows(e);
    return f;
  };
  return build_weights(config, topo, ctx, dtype, nullptr, spec);
}

}  // namespace tpllama
