// The forward pass of one pipeline stage, top to bottom as in the LLaMA paper, with the Megatron
// TP all-reduces written where they happen (no-ops on a TP group of one).
#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/clock.h"
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
  // Their pages now, not in the first step (on the CPU a first write faults them in).
  for (Buffer* b : {&x_, &xn_, &xin_, &q_, &k_, &v_, &att_, &gate_, &up_, &act_, &step_, &last_,
                    &logits_, &scratch_})
    if (b->nbytes() > 0) ops::zero(ctx_, b->view(DType::kI8, {static_cast<int64_t>(b->nbytes())}));
}

namespace {

// FLOPs of out = x · Wᵀ: 2 × rows × x's columns × out's columns.
double product_flops(const Tensor& x, const Tensor& out) {
  return 2.0 * static_cast<double>(x.size(0)) * static_cast<double>(x.size(1)) *
         static_cast<double>(out.size(1));
}

// A step's indices and RoPE tables packed in one area, the same layout on the host and on the
// device: tokens, KV rows, sequence slots and context lengths (n each), the logit rows (r), cos and
// sin (n × half each), then the runs ([first token, length] each).
struct StepWords {
  int32_t* tokens;
  int32_t* kv_rows;
  int32_t* seq;
  int32_t* n_ctx;
  int32_t* logit_rows;
  float* cos;
  float* sin;
  int32_t* runs;
};

StepWords step_words(void* base, int64_t n, int64_t r, int64_t half) {
  StepWords w{};
  w.tokens = static_cast<int32_t*>(base);
  w.kv_rows = w.tokens + n;
  w.seq = w.kv_rows + n;
  w.n_ctx = w.seq + n;
  w.logit_rows = w.n_ctx + n;
  w.cos = reinterpret_cast<float*>(w.logit_rows + r);
  w.sin = w.cos + n * half;
  w.runs = reinterpret_cast<int32_t*>(w.sin + n * half);
  return w;
}

// What attention's launch follows: the runs (consecutive positions of one sequence), the longest
// of them, and the longest context.
struct StepRuns {
  int64_t n_runs = 0;
  int max_ctx = 0;
  int max_run = 0;
};

// Each token's id (on the first stage, which embeds; 0 elsewhere), KV row, slot and context length,
// and the runs they form.
StepRuns pack_tokens(const StepBatch& batch, const KvCache& cache, bool embeds,
                     const StepWords& w) {
  if (embeds) TPLLAMA_CHECK(batch.tokens.size() == batch.size(), "batch tokens");
  StepRuns s;
  const int64_t n = static_cast<int64_t>(batch.size());
  for (int64_t m = 0; m < n; ++m) {
    const int slot = batch.slots[static_cast<size_t>(m)],
              pos = batch.positions[static_cast<size_t>(m)];
    TPLLAMA_CHECK(slot >= 0 && slot < cache.max_slots(), "slot ", slot, " of ", cache.max_slots());
    w.tokens[m] = embeds ? batch.tokens[static_cast<size_t>(m)] : 0;
    w.kv_rows[m] = static_cast<int32_t>(cache.row_of(slot, pos));
    w.seq[m] = slot;
    w.n_ctx[m] = pos + 1;
    s.max_ctx = std::max(s.max_ctx, pos + 1);
    if (m > 0 && w.seq[m - 1] == slot && w.n_ctx[m - 1] == pos) {
      ++w.runs[2 * s.n_runs - 1];
    } else {
      w.runs[2 * s.n_runs] = static_cast<int32_t>(m);
      w.runs[2 * s.n_runs + 1] = 1;
      ++s.n_runs;
    }
    s.max_run = std::max(s.max_run, w.runs[2 * s.n_runs - 1]);
  }
  return s;
}

// RoPE's tables: cos and sin of each token's position times each frequency.
void pack_rope(const StepBatch& batch, const std::vector<double>& inv_freq, const StepWords& w) {
  const int64_t n = static_cast<int64_t>(batch.size()),
                half = static_cast<int64_t>(inv_freq.size());
  for (int64_t m = 0; m < n; ++m) {
    const int pos = batch.positions[static_cast<size_t>(m)];
    for (int64_t i = 0; i < half; ++i) {  // angles in double: positions reach 10^5 and beyond
      const double angle = pos * inv_freq[static_cast<size_t>(i)];
      w.cos[m * half + i] = static_cast<float>(std::cos(angle));
      w.sin[m * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace

// Fills the host staging area, packed for this step's n tokens, r logit rows and its runs
// (consecutive positions of one sequence), and uploads it in one copy.
LlamaModel::StepViews LlamaModel::stage_step(const StepBatch& batch, const KvCache& cache) {
  const int64_t n = static_cast<int64_t>(batch.size()),
                r = static_cast<int64_t>(batch.logit_rows.size());
  const int64_t half = static_cast<int64_t>(inv_freq_.size());
  const StepWords host = step_words(step_host_.data(), n, r, half);
  const StepRuns runs = pack_tokens(batch, cache, topology_.is_first_stage(), host);
  pack_rope(batch, inv_freq_, host);
  for (int64_t i = 0; i < r; ++i) {
    const int32_t row = batch.logit_rows[static_cast<size_t>(i)];
    TPLLAMA_CHECK(row >= 0 && row < n, "logit row ", row, " of a ", n, "-token step");
    host.logit_rows[i] = row;
  }
  const int64_t used = 4 * n + r + 2 * n * half + 2 * runs.n_runs;
  const Device d = ctx_.device;
  ops::upload(ctx_, Tensor(step_.data(), DType::kI32, {used}, d), host.tokens);
  const StepWords dev = step_words(step_.data(), n, r, half);
  StepViews v;
  v.tokens = Tensor(dev.tokens, DType::kI32, {n}, d);
  v.kv_rows = Tensor(dev.kv_rows, DType::kI32, {n}, d);
  v.seq = Tensor(dev.seq, DType::kI32, {n}, d);
  v.n_ctx = Tensor(dev.n_ctx, DType::kI32, {n}, d);
  v.logit_rows = Tensor(dev.logit_rows, DType::kI32, {r}, d);
  v.cos = Tensor(dev.cos, DType::kF32, {n, half}, d);
  v.sin = Tensor(dev.sin, DType::kF32, {n, half}, d);
  v.runs = Tensor(dev.runs, DType::kI32, {runs.n_runs, 2}, d);
  // A pure-decode step does not tell attention its longest context: its splits along the sequence
  // then follow the cache's full width, the same for every step of this shape, so a replayed CUDA
  // graph and an eager launch sum in the same order (and give the same tokens).
  v.max_ctx = runs.max_run > 1 ? runs.max_ctx : 0;
  v.max_run = runs.max_run;
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
  const Clock::time_point start = Clock::now();
  lap_start_ = start;
  const StepViews step = stage_step(batch, cache);
  cache.upload_tables();
  if (split_ != nullptr) phase_ = step.max_run > 1 ? &split_->prefill : &split_->decode;
  lap("stage the step");
  if (split_ != nullptr) {  // timed op by op: never a graph
    Tensor out = run_stage(step, cache, n, r);
    phase_->forward_seconds += seconds_since(start);
    ++phase_->forwards;
    return out;
  }
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

void LlamaModel::lap(const char* op, double flops) {
  if (split_ == nullptr) return;
  ops::synchronize(ctx_);
  const Clock::time_point now = Clock::now();
  OpSplit::Entry& e = phase_->ops[op];
  e.seconds += seconds_between(lap_start_, now);
  ++e.calls;
  e.flops += flops;
  lap_start_ = now;
}

Tensor LlamaModel::output(int64_t n, int64_t r) const {
  if (topology_.is_last_stage()) return logits_.view(DType::kF32, {r, vocab_local_});
  return x_.view(DType::kF32, {n, config_.dim});
}

Tensor LlamaModel::run_stage(const StepViews& step, KvCache& cache, int64_t n, int64_t r) {
  const Activations a = activations(n);
  if (topology_.is_first_stage()) {
    // Token embedding (vocab-parallel: each rank fills the rows it holds, the all-reduce the rest).
    ops::embedding(ctx_, a.x, weights_.embed, step.tokens, vocab_begin_);
    lap("embedding");
    tp_comm_.all_reduce_sum(a.x);
    lap("TP all-reduce");
  }  // later stages find the previous stage's hidden states in x (input_hidden)

  const ops::AttentionShape shape{
      heads_.n_heads_local,
      heads_.n_kv_heads_local,
      config_.head_dim,
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim))),
      cache.block_size(),
      config_.sliding_window};
  for (int l = 0; l < n_layers_local(); ++l) {
    attention_block(a, l, step, cache, shape);
    feed_forward_block(a, l);
  }

  if (!topology_.is_last_stage()) return a.x;
  return lm_head(a.x, step, n, r);
}

LlamaModel::Activations LlamaModel::activations(int64_t n) const {
  const int64_t dim = config_.dim;
  const int64_t q_local = heads_.n_heads_local * config_.head_dim, kv_local = kv_dim_local();
  const int64_t hidden_local = heads_.ffn_local;
  Activations a;
  a.x = x_.view(DType::kF32, {n, dim});
  a.xn = xn_.view(DType::kF32, {n, dim});
  a.xin = gemm_input(xin_, xn_, {n, dim});
  a.q = q_.view(DType::kF32, {n, q_local});
  a.k = k_.view(DType::kF32, {n, kv_local});
  a.v = v_.view(DType::kF32, {n, kv_local});
  a.att = att_.view(in_dtype_, {n, q_local});
  a.gate = gate_.view(DType::kF32, {n, hidden_local});
  a.up = up_.view(DType::kF32, {n, hidden_local});
  a.act = gemm_input(act_, gate_, {n, hidden_local});
  return a;
}

// Attention block: x += Wo · attention(rope(q), rope(k), v), xin = rmsnorm(x), with q = Wq xin
// (+ bq), k = Wk xin (+ bk), v = Wv xin (+ bv) where the model has biases (Qwen2), and q and k
// each RMSNorm-ed per head before RoPE where it has q_norm and k_norm (Qwen3).
void LlamaModel::attention_block(const Activations& a, int layer, const StepViews& step,
                                 KvCache& cache, const ops::AttentionShape& shape) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const float eps = static_cast<float>(config_.rms_norm_eps);
  ops::rms_norm(ctx_, a.xin, a.x, w.attn_norm, eps);
  lap("RMSNorm");
  ops::matmuls(ctx_, a.xin, {{a.q, &w.wq}, {a.k, &w.wk}, {a.v, &w.wv}});
  lap("GEMM q, k, v",
      product_flops(a.xin, a.q) + product_flops(a.xin, a.k) + product_flops(a.xin, a.v));
  if (!w.bq.empty()) {
    ops::add_bias(ctx_, a.q, w.bq);
    ops::add_bias(ctx_, a.k, w.bk);
    ops::add_bias(ctx_, a.v, w.bv);
    lap("q, k, v biases");
  }
  if (!w.q_norm.empty()) {  // each head's vector is a row of its own
    const int64_t hd = config_.head_dim;
    const auto heads = [&](const Tensor& t) {
      return Tensor(t.data(), DType::kF32, {t.numel() / hd, hd}, ctx_.device);
    };
    ops::rms_norm(ctx_, heads(a.q), heads(a.q), w.q_norm, eps);
    ops::rms_norm(ctx_, heads(a.k), heads(a.k), w.k_norm, eps);
    lap("q, k norms");
  }
  ops::rope(ctx_, a.q, step.cos, step.sin, heads_.n_heads_local, config_.head_dim);
  ops::rope(ctx_, a.k, step.cos, step.sin, heads_.n_kv_heads_local, config_.head_dim);
  lap("RoPE");
  // Append this step's keys and values, then attend causally up to each token's own position.
  const ops::KvBatch kv{cache.key_pool(layer),
                        cache.value_pool(layer),
                        cache.device_tables(),
                        step.seq,
                        step.n_ctx,
                        step.max_ctx,
                        step.runs,
                        step.max_run};
  ops::kv_write(ctx_, kv.keys, kv.values, a.k, a.v, step.kv_rows);
  lap("KV write");
  ops::attention(ctx_, a.att, a.q, kv, shape);
  lap("attention");
  ops::matmul(ctx_, a.xn, a.att, w.wo);
  lap("GEMM o", product_flops(a.att, a.xn));
  tp_comm_.all_reduce_sum(a.xn);  // row-parallel Wo: partial sums over this rank's heads
  lap("TP all-reduce");
  ops::add(ctx_, a.x, a.xn);
  lap("residual add");
}

// Feed-forward block: x += W2 (silu(W1 xin) * W3 xin), xin = rmsnorm(x).
void LlamaModel::feed_forward_block(const Activations& a, int layer) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const float eps = static_cast<float>(config_.rms_norm_eps);
  ops::rms_norm(ctx_, a.xin, a.x, w.ffn_norm, eps);
  lap("RMSNorm");
  ops::matmuls(ctx_, a.xin, {{a.gate, &w.w1}, {a.up, &w.w3}});
  lap("GEMM gate, up", product_flops(a.xin, a.gate) + product_flops(a.xin, a.up));
  ops::silu_mul(ctx_, a.act, a.gate, a.up);
  lap("SiLU x up");
  ops::matmul(ctx_, a.xn, a.act, w.w2);
  lap("GEMM down", product_flops(a.act, a.xn));
  tp_comm_.all_reduce_sum(a.xn);  // row-parallel W2
  lap("TP all-reduce");
  ops::add(ctx_, a.x, a.xn);
  lap("residual add");
}

// Final norm and lm_head, only for the rows whose next token is wanted.
Tensor LlamaModel::lm_head(const Tensor& x, const StepViews& step, int64_t n, int64_t r) {
  const int64_t dim = config_.dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor last = last_.view(DType::kF32, {r, dim});
  Tensor logits = output(n, r);
  if (r == 0) return logits;
  Tensor last_in = gemm_input(xin_, last_, {r, dim});
  ops::gather_rows(ctx_, last, x, step.logit_rows);
  ops::rms_norm(ctx_, last_in, last, weights_.final_norm, eps);
  lap("RMSNorm");
  ops::matmul(ctx_, logits, last_in, weights_.lm_head);
  // The padding rows of the last vocab shard can never be chosen.
  ops::fill_columns(ctx_, logits, std::max(config_.vocab_size - vocab_begin_, 0), -INFINITY);
  lap("GEMM lm_head", product_flops(last_in, logits));
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
