// The forward pass of one pipeline stage, top to bottom as in the LLaMA paper, with the Megatron
// TP all-reduces written where they happen (no-ops on a TP group of one).
#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "ops/attention.h"
#include "ops/device.h"
#include "ops/elementwise.h"
#include "ops/graph.h"
#include "ops/matmul.h"
#include "ops/rows.h"
#include "ops/sampling.h"

namespace tpllama {

LlamaModel::LlamaModel(const Checkpoint& checkpoint, const Topology& topology,
                       Communicator& tp_comm, DeviceContext ctx, ModelLimits limits, DType dtype)
    : LlamaModel(checkpoint.config(), load_weights(checkpoint, topology, ctx, dtype), topology,
                 tp_comm, ctx, limits) {}

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
  TPLLAMA_CHECK(
      limits.max_batch_tokens > 0 && limits.max_logit_rows > 0 && limits.max_sample_rows > 0,
      "limits ", limits.max_batch_tokens, " ", limits.max_logit_rows, " ", limits.max_sample_rows);
  const size_t t = static_cast<size_t>(limits.max_batch_tokens);
  const size_t r = static_cast<size_t>(limits.max_logit_rows);
  const size_t f = sizeof(float);
  const size_t q_local = static_cast<size_t>(heads_.n_heads_local * config_.head_dim);
  const size_t hidden_local = static_cast<size_t>(heads_.ffn_local);
  const size_t dim = static_cast<size_t>(config_.dim), kv = static_cast<size_t>(kv_dim_local());
  const int64_t widest =
      std::max<int64_t>({config_.dim, static_cast<int64_t>(q_local), heads_.ffn_local});
  const size_t need = std::max(
      ops::scratch_bytes(ctx_, std::max(limits.max_batch_tokens, limits.max_logit_rows), widest),
      ops::sampling_scratch_bytes(ctx_, limits.max_sample_rows,
                                  int64_t{vocab_local_} * topology.tp_size()));
  if (need > ctx_.scratch_bytes) {
    scratch_ = ops::allocate(ctx_, need);
    ctx_.scratch = scratch_.data();
    ctx_.scratch_bytes = need;
  }
  // GEMM inputs are written in the dtype the device's matmul reads (f32 on the CPU, where they
  // share the f32 buffers; bf16 beside them on a GPU with bf16 weights).
  in_dtype_ = ops::matmul_input_dtype(
      ctx_, weights_.layers.empty() ? weights_.lm_head : weights_.layers[0].wq);
  const size_t in = dtype_size(in_dtype_);
  const bool separate = in_dtype_ != DType::kF32;
  x_ = ops::allocate(ctx_, t * dim * f);
  xn_ = ops::allocate(ctx_, t * dim * f);
  if (separate) xin_ = ops::allocate(ctx_, std::max(t, r) * dim * in);
  q_ = ops::allocate(ctx_, t * q_local * f);
  k_ = ops::allocate(ctx_, t * kv * f);
  v_ = ops::allocate(ctx_, t * kv * f);
  att_ = ops::allocate(ctx_, t * q_local * in);
  gate_ = ops::allocate(ctx_, t * hidden_local * f);
  up_ = ops::allocate(ctx_, t * hidden_local * f);
  if (separate) act_ = ops::allocate(ctx_, t * hidden_local * in);
  const size_t step_words = 6 * t + r + 2 * t * static_cast<size_t>(config_.head_dim / 2);
  step_host_ = Buffer(step_words * 4);
  step_ = ops::allocate(ctx_, step_words * 4);
  last_ = ops::allocate(ctx_, r * dim * f);
  logits_ = ops::allocate(ctx_, r * static_cast<size_t>(vocab_local_) * f);
}

// Fills the host staging area, packed for this step's n tokens, r logit rows and its runs
// (consecutive positions of one sequence), and uploads it in one copy.
LlamaModel::StepViews LlamaModel::stage_step(const StepBatch& batch, const KvCache& cache) {
  const int64_t n = static_cast<int64_t>(batch.size()),
                r = static_cast<int64_t>(batch.logit_rows.size());
  const int64_t half = static_cast<int64_t>(inv_freq_.size());
  auto* words = static_cast<int32_t*>(step_host_.data());
  int32_t* tokens = words;
  int32_t* kv_rows = tokens + n;
  int32_t* seq = kv_rows + n;
  int32_t* n_ctx = seq + n;
  int32_t* logit_rows = n_ctx + n;
  auto* cos = reinterpret_cast<float*>(logit_rows + r);
  float* sin = cos + n * half;
  int32_t* runs = reinterpret_cast<int32_t*>(sin + n * half);
  const bool embeds = topology_.is_first_stage();
  if (embeds) TPLLAMA_CHECK(batch.tokens.size() == batch.size(), "batch tokens");
  int max_ctx = 0, max_run = 0;
  int64_t n_runs = 0;
  for (int64_t m = 0; m < n; ++m) {
    const int slot = batch.slots[static_cast<size_t>(m)],
              pos = batch.positions[static_cast<size_t>(m)];
    TPLLAMA_CHECK(slot >= 0 && slot < cache.max_slots(), "slot ", slot, " of ", cache.max_slots());
    tokens[m] = embeds ? batch.tokens[static_cast<size_t>(m)] : 0;
    kv_rows[m] = static_cast<int32_t>(cache.row_of(slot, pos));
    seq[m] = slot;
    n_ctx[m] = pos + 1;
    max_ctx = std::max(max_ctx, pos + 1);
    if (m > 0 && seq[m - 1] == slot && n_ctx[m - 1] == pos) {
      ++runs[2 * n_runs - 1];
    } else {
      runs[2 * n_runs] = static_cast<int32_t>(m);
      runs[2 * n_runs + 1] = 1;
      ++n_runs;
    }
    max_run = std::max(max_run, runs[2 * n_runs - 1]);
    for (int64_t i = 0; i < half; ++i) {  // angles in double: positions reach 10^5 and beyond
      const double angle = pos * inv_freq_[static_cast<size_t>(i)];
      cos[m * half + i] = static_cast<float>(std::cos(angle));
      sin[m * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  for (int64_t i = 0; i < r; ++i) {
    const int32_t row = batch.logit_rows[static_cast<size_t>(i)];
    TPLLAMA_CHECK(row >= 0 && row < n, "logit row ", row, " of a ", n, "-token step");
    logit_rows[i] = row;
  }
  const int64_t used = 4 * n + r + 2 * n * half + 2 * n_runs;
  const Device d = ctx_.device;
  auto* base = static_cast<int32_t*>(step_.data());
  ops::upload(ctx_, Tensor(base, DType::kI32, {used}, d), words);
  StepViews v;
  v.tokens = Tensor(base, DType::kI32, {n}, d);
  v.kv_rows = Tensor(base + n, DType::kI32, {n}, d);
  v.seq = Tensor(base + 2 * n, DType::kI32, {n}, d);
  v.n_ctx = Tensor(base + 3 * n, DType::kI32, {n}, d);
  v.logit_rows = Tensor(base + 4 * n, DType::kI32, {r}, d);
  v.cos = Tensor(base + 4 * n + r, DType::kF32, {n, half}, d);
  v.sin = Tensor(base + 4 * n + r + n * half, DType::kF32, {n, half}, d);
  v.runs = Tensor(base + 4 * n + r + 2 * n * half, DType::kI32, {n_runs, 2}, d);
  // A pure-decode step does not tell attention its longest context: its splits along the sequence
  // then follow the cache's full width, the same for every step of this shape, so a replayed CUDA
  // graph and an eager launch sum in the same order (and give the same tokens).
  v.max_ctx = max_run > 1 ? max_ctx : 0;
  v.max_run = max_run;
  return v;
}

Tensor LlamaModel::forward(const StepBatch& batch, KvCache& cache) {
  const int64_t n = static_cast<int64_t>(batch.positions.size());
  if (n < 1 || n > limits_.max_batch_tokens)
    fail("step of ", n, " tokens outside [1, ", limits_.max_batch_tokens, "]");
  TPLLAMA_CHECK(batch.positions.size() == static_cast<size_t>(n) &&
                    batch.slots.size() == static_cast<size_t>(n),
                "batch");
  const int64_t r = static_cast<int64_t>(batch.logit_rows.size());
  if (r > limits_.max_logit_rows)
    fail("step wants ", r, " logit rows, limit ", limits_.max_logit_rows);
  const StepViews step = stage_step(batch, cache);
  cache.upload_tables();
  if (!graphs_on_ || step.max_run > 1 || !tp_comm_.graph_capturable())
    return run_stage(step, cache, n, r);

  // A pure-decode step: replay its recording, made at the first step of this shape and cache.
  const GraphKey key{n, r, cache.key_pool(0).data()};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    ops::Graph graph;
    std::string failure;
    try {
      ops::begin_capture(ctx_);
      run_stage(step, cache, n, r);
      graph = ops::end_capture(ctx_);
    } catch (const Error& e) {
      ops::abort_capture(ctx_);
      failure = e.what();
    } catch (...) {
      ops::abort_capture(ctx_);
      throw;
    }
    // Whether a collective is recorded must be the same on every rank of the TP group (NCCL's
    // rule: a recorded all-reduce cannot meet a launched one), so the group agrees before any rank
    // replays or falls back; a failure on one rank turns graphs off on all of them.
    if (!tp_comm_.all_true(failure.empty())) {
      graphs_on_ = false;
      const std::string where =
          failure.empty() ? std::string("on another rank of the TP group") : "(" + failure + ")";
      log::warn("CUDA graphs off for this run: recording a decode step failed " + where +
                "; every step launches its kernels");
      return run_stage(step, cache, n, r);
    }
    it = graphs_.emplace(key, std::move(graph)).first;
  }
  ops::launch(ctx_, it->second);
  return output(n, r);
}

Tensor LlamaModel::output(int64_t n, int64_t r) const {
  if (topology_.is_last_stage()) return logits_.view(DType::kF32, {r, vocab_local_});
  return x_.view(DType::kF32, {n, config_.dim});
}

Tensor LlamaModel::run_stage(const StepViews& step, KvCache& cache, int64_t n, int64_t r) {
  const int64_t dim = config_.dim, hd = config_.head_dim;
  const int64_t q_local = heads_.n_heads_local * hd, kv_local = kv_dim_local();
  const int64_t hidden_local = heads_.ffn_local;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor x = x_.view(DType::kF32, {n, dim});
  Tensor xn = xn_.view(DType::kF32, {n, dim});   // a sublayer's output, all-reduced across TP
  Tensor xin = gemm_input(xin_, xn_, {n, dim});  // the normalised input of a sublayer
  Tensor q = q_.view(DType::kF32, {n, q_local});
  Tensor k = k_.view(DType::kF32, {n, kv_local});
  Tensor v = v_.view(DType::kF32, {n, kv_local});
  Tensor att = att_.view(in_dtype_, {n, q_local});
  Tensor gate = gate_.view(DType::kF32, {n, hidden_local});
  Tensor up = up_.view(DType::kF32, {n, hidden_local});
  Tensor act = gemm_input(act_, gate_, {n, hidden_local});

  if (topology_.is_first_stage()) {
    // Token embedding (vocab-parallel: each rank fills the rows it holds, the all-reduce the rest).
    ops::embedding(ctx_, x, weights_.embed, step.tokens, vocab_begin_);
    tp_comm_.all_reduce_sum(x);
  }  // later stages find the previous stage's hidden states in x (input_hidden)

  const ops::AttentionShape shape{heads_.n_heads_local, heads_.n_kv_heads_local, config_.head_dim,
                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                                  cache.block_size()};
  for (int l = 0; l < n_layers_local(); ++l) {
    const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    // Attention block: x += Wo · attention(rope(Wq xin), rope(Wk xin), Wv xin), xin = rmsnorm(x).
    ops::rms_norm(ctx_, xin, x, w.attn_norm, eps);
    ops::matmuls(ctx_, xin, {{q, &w.wq}, {k, &w.wk}, {v, &w.wv}});
    ops::rope(ctx_, q, step.cos, step.sin, heads_.n_heads_local, config_.head_dim);
    ops::rope(ctx_, k, step.cos, step.sin, heads_.n_kv_heads_local, config_.head_dim);
    // Append this step's keys and values, then attend causally up to each token's own position.
    const ops::KvBatch kv{cache.key_pool(l), cache.value_pool(l), cache.device_tables(),
                          step.seq,          step.n_ctx,          step.max_ctx,
                          step.runs,         step.max_run};
    ops::kv_write(ctx_, kv.keys, kv.values, k, v, step.kv_rows);
    ops::attention(ctx_, att, q, kv, shape);
    ops::matmul(ctx_, xn, att, w.wo);
    tp_comm_.all_reduce_sum(xn);  // row-parallel Wo: partial sums over this rank's heads
    ops::add(ctx_, x, xn);

    // Feed-forward block: x += W2 (silu(W1 xin) * W3 xin), xin = rmsnorm(x).
    ops::rms_norm(ctx_, xin, x, w.ffn_norm, eps);
    ops::matmuls(ctx_, xin, {{gate, &w.w1}, {up, &w.w3}});
    ops::silu_mul(ctx_, act, gate, up);
    ops::matmul(ctx_, xn, act, w.w2);
    tp_comm_.all_reduce_sum(xn);  // row-parallel W2
    ops::add(ctx_, x, xn);
  }

  if (!topology_.is_last_stage()) return x;

  // Final norm and lm_head, only for the rows whose next token is wanted.
  Tensor last = last_.view(DType::kF32, {r, dim});
  Tensor logits = output(n, r);
  if (r == 0) return logits;
  Tensor last_in = gemm_input(xin_, last_, {r, dim});
  ops::gather_rows(ctx_, last, x, step.logit_rows);
  ops::rms_norm(ctx_, last_in, last, weights_.final_norm, eps);
  ops::matmul(ctx_, logits, last_in, weights_.lm_head);
  // The padding rows of the last vocab shard can never be chosen.
  ops::fill_columns(ctx_, logits, std::max(config_.vocab_size - vocab_begin_, 0), -INFINITY);
  return logits;
}

Tensor LlamaModel::gemm_input(const Buffer& separate, const Buffer& f32,
                              std::initializer_list<int64_t> shape) const {
  return (in_dtype_ == DType::kF32 ? f32 : separate).view(in_dtype_, shape);
}

Tensor LlamaModel::input_hidden(int64_t n_tokens) {
  if (n_tokens < 1 || n_tokens > limits_.max_batch_tokens)
    fail("step of ", n_tokens, " tokens outside [1, ", limits_.max_batch_tokens, "]");
  return x_.view(DType::kF32, {n_tokens, config_.dim});
}

}  // namespace tpllama
