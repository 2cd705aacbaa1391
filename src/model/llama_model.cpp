// The forward pass of one pipeline stage, top to bottom as in the LLaMA paper, with the Megatron
// TP all-reduces written where they happen (no-ops on a TP group of one).
#include "model/llama_model.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "ops/ops.h"

namespace tpllama {

void StepBatch::clear() {
  tokens.clear();
  positions.clear();
  slots.clear();
  logit_rows.clear();
}

LlamaModel::LlamaModel(const Checkpoint& checkpoint, const Topology& topology, Communicator& tp_comm,
                       DeviceContext ctx, ModelLimits limits, DType dtype)
    : LlamaModel(checkpoint.config(), load_weights(checkpoint, topology, ctx, dtype), topology, tp_comm, ctx, limits) {}

LlamaModel::LlamaModel(const LlamaConfig& config, ModelWeights weights, const Topology& topology,
                       Communicator& tp_comm, DeviceContext ctx, ModelLimits limits)
    : config_(config),
      topology_(topology),
      tp_comm_(tp_comm),
      ctx_(ctx),
      limits_(limits),
      heads_(head_layout(config_, topology.tp_size(), topology.tp_rank())),
      vocab_begin_(topology.tp_rank() * tpllama::vocab_local(config_, topology.tp_size())),
      vocab_local_(tpllama::vocab_local(config_, topology.tp_size())),
      weights_(std::move(weights)),
      inv_freq_(config_.rope_inv_freq()) {
  TPLLAMA_CHECK(limits.max_batch_tokens > 0 && limits.max_logit_rows > 0, "limits ",
                limits.max_batch_tokens, " ", limits.max_logit_rows);
  const size_t t = static_cast<size_t>(limits.max_batch_tokens);
  const size_t f = sizeof(float);
  const size_t q_local = static_cast<size_t>(heads_.n_heads_local * config_.head_dim);
  const size_t hidden_local = static_cast<size_t>(heads_.ffn_local);
  x_ = Buffer(t * static_cast<size_t>(config_.dim) * f);
  xn_ = Buffer(t * static_cast<size_t>(config_.dim) * f);
  q_ = Buffer(t * q_local * f);
  k_ = Buffer(t * static_cast<size_t>(kv_dim_local()) * f);
  v_ = Buffer(t * static_cast<size_t>(kv_dim_local()) * f);
  att_ = Buffer(t * q_local * f);
  gate_ = Buffer(t * hidden_local * f);
  up_ = Buffer(t * hidden_local * f);
  cos_ = Buffer(t * static_cast<size_t>(config_.head_dim / 2) * f);
  sin_ = Buffer(t * static_cast<size_t>(config_.head_dim / 2) * f);
  tokens_ = Buffer(t * sizeof(int32_t));
  const size_t r = static_cast<size_t>(limits.max_logit_rows);
  last_ = Buffer(r * static_cast<size_t>(config_.dim) * f);
  logits_ = Buffer(r * static_cast<size_t>(vocab_local_) * f);
}

void LlamaModel::compute_rope_tables(const StepBatch& batch) {
  const size_t half = inv_freq_.size();
  auto* c = static_cast<float*>(cos_.data());
  auto* s = static_cast<float*>(sin_.data());
  for (size_t m = 0; m < batch.size(); ++m) {
    for (size_t i = 0; i < half; ++i) {  // angles in double: positions reach 10^5 and beyond
      const double angle = batch.positions[m] * inv_freq_[i];
      c[m * half + i] = static_cast<float>(std::cos(angle));
      s[m * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

Tensor LlamaModel::forward(const StepBatch& batch, KvCache& cache) {
  const int64_t n = static_cast<int64_t>(batch.positions.size());
  const int64_t dim = config_.dim, hd = config_.head_dim;
  const int64_t q_local = heads_.n_heads_local * hd, kv_local = kv_dim_local();
  const int64_t hidden_local = heads_.ffn_local;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (n < 1 || n > limits_.max_batch_tokens)
    fail("step of ", n, " tokens outside [1, ", limits_.max_batch_tokens, "]");
  TPLLAMA_CHECK(batch.positions.size() == static_cast<size_t>(n) && batch.slots.size() == static_cast<size_t>(n), "batch");

  Tensor x = x_.view(DType::kF32, {n, dim});
  Tensor xn = xn_.view(DType::kF32, {n, dim});
  Tensor q = q_.view(DType::kF32, {n, q_local});
  Tensor k = k_.view(DType::kF32, {n, kv_local});
  Tensor v = v_.view(DType::kF32, {n, kv_local});
  Tensor att = att_.view(DType::kF32, {n, q_local});
  Tensor gate = gate_.view(DType::kF32, {n, hidden_local});
  Tensor up = up_.view(DType::kF32, {n, hidden_local});
  Tensor cos = cos_.view(DType::kF32, {n, hd / 2});
  Tensor sin = sin_.view(DType::kF32, {n, hd / 2});
  compute_rope_tables(batch);

  if (topology_.is_first_stage()) {
    // Token embedding (vocab-parallel: each rank fills the rows it holds, the all-reduce the rest).
    TPLLAMA_CHECK(batch.tokens.size() == batch.size(), "batch tokens");
    Tensor tokens = tokens_.view(DType::kI32, {n});
    std::memcpy(tokens.data(), batch.tokens.data(), static_cast<size_t>(n) * sizeof(int32_t));
    ops::embedding(ctx_, x, weights_.embed, tokens, vocab_begin_);
    tp_comm_.all_reduce_sum(x);
  }  // later stages find the previous stage's hidden states in x (input_hidden)

  std::vector<ops::KvView> kv(static_cast<size_t>(n));
  const ops::AttentionShape shape{heads_.n_heads_local, heads_.n_kv_heads_local, config_.head_dim,
                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), cache.block_size()};
  for (int l = 0; l < n_layers_local(); ++l) {
    const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    // Attention block: x += Wo · attention(rope(Wq xn), rope(Wk xn), Wv xn), xn = rmsnorm(x).
    ops::rms_norm(ctx_, xn, x, w.attn_norm, eps);
    ops::matmul(ctx_, q, xn, w.wq);
    ops::matmul(ctx_, k, xn, w.wk);
    ops::matmul(ctx_, v, xn, w.wv);
    ops::rope(ctx_, q, cos, sin, heads_.n_heads_local, config_.head_dim);
    ops::rope(ctx_, k, cos, sin, heads_.n_kv_heads_local, config_.head_dim);
    // Append this step's keys and values, then attend causally up to each token's own position.
    for (int64_t m = 0; m < n; ++m) {
      const int slot = batch.slots[static_cast<size_t>(m)];
      const int pos = batch.positions[static_cast<size_t>(m)];
      const int64_t row = cache.row_of(slot, pos);
      std::memcpy(cache.keys(l) + row * kv_local, k.as<float>() + m * kv_local, static_cast<size_t>(kv_local) * sizeof(float));
      std::memcpy(cache.values(l) + row * kv_local, v.as<float>() + m * kv_local, static_cast<size_t>(kv_local) * sizeof(float));
      kv[static_cast<size_t>(m)] = {cache.keys(l), cache.values(l), cache.blocks(slot).data(), pos + 1};
    }
    ops::attention(ctx_, att, q, kv, shape);
    ops::matmul(ctx_, xn, att, w.wo);
    tp_comm_.all_reduce_sum(xn);  // row-parallel Wo: partial sums over this rank's heads
    ops::add(ctx_, x, xn);

    // Feed-forward block: x += W2 (silu(W1 xn) * W3 xn), xn = rmsnorm(x).
    ops::rms_norm(ctx_, xn, x, w.ffn_norm, eps);
    ops::matmul(ctx_, gate, xn, w.w1);
    ops::matmul(ctx_, up, xn, w.w3);
    ops::silu_mul(ctx_, gate, up);
    ops::matmul(ctx_, xn, gate, w.w2);
    tp_comm_.all_reduce_sum(xn);  // row-parallel W2
    ops::add(ctx_, x, xn);
  }

  if (!topology_.is_last_stage()) return x;

  // Final norm and lm_head, only for the rows whose next token is wanted.
  const int64_t r = static_cast<int64_t>(batch.logit_rows.size());
  if (r > limits_.max_logit_rows) fail("step wants ", r, " logit rows, limit ", limits_.max_logit_rows);
  Tensor last = last_.view(DType::kF32, {r, dim});
  for (int64_t i = 0; i < r; ++i) {
    const int32_t row = batch.logit_rows[static_cast<size_t>(i)];
    TPLLAMA_CHECK(row >= 0 && row < n, "logit row ", row);
    std::memcpy(last.as<float>() + i * dim, x.as<float>() + row * dim, static_cast<size_t>(dim) * sizeof(float));
  }
  Tensor logits = logits_.view(DType::kF32, {r, vocab_local_});
  if (r == 0) return logits;
  ops::rms_norm(ctx_, last, last, weights_.final_norm, eps);
  ops::matmul(ctx_, logits, last, weights_.lm_head);
  const int pad_begin = config_.vocab_size - vocab_begin_;  // padding rows of the last vocab shard
  if (pad_begin < vocab_local_)
    for (int64_t i = 0; i < r; ++i)
      for (int c = std::max(pad_begin, 0); c < vocab_local_; ++c) logits.as<float>()[i * vocab_local_ + c] = -INFINITY;
  return logits;
}

}  // namespace tpllama

namespace tpllama {

Tensor LlamaModel::input_hidden(int64_t n_tokens) {
  if (n_tokens < 1 || n_tokens > limits_.max_batch_tokens)
    fail("step of ", n_tokens, " tokens outside [1, ", limits_.max_batch_tokens, "]");
  return x_.view(DType::kF32, {n_tokens, config_.dim});
}

}  // namespace tpllama
