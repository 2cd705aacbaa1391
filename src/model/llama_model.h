// LlamaModel: one pipeline stage of a LLaMA model on one rank, and its forward pass over a batch
// of tokens from many sequences (prefill chunks and decode steps mixed).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/device_context.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/kv_cache.h"
#include "model/shard_table.h"
#include "model/step_batch.h"
#include "model/weights.h"
#include "ops/device.h"
#include "ops/graph.h"
#include "ops/matmul.h"
#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace tpllama {

namespace ops {
struct AttentionShape;
}

// Where a stage's forward spends its time, op by op (bench --op-split): wall seconds and calls by
// op name, each op's device work finished before the next one is timed; steps holding prompt tokens
// (a run of two or more tokens of a sequence) and pure-decode steps apart.
struct OpSplit {
  struct Entry {
    double seconds = 0;
    long long calls = 0;
    double flops = 0;  // of the op's matrix products on this rank (2 per multiply-add); 0: none
  };
  struct Phase {
    std::map<std::string, Entry> ops;
    double forward_seconds = 0;  // the stage's whole forward passes, the ops and what is between
    long long forwards = 0;
  };
  Phase prefill, decode;
};

struct ModelLimits {
  int max_batch_tokens = 0;  // tokens per forward step
  int max_logit_rows = 0;    // logit rows per forward step
  int max_sample_rows = 64;  // rows drawn from at once (a step's sampled rows go in chunks of this)
};

class LlamaModel {
 public:
  // The stage's weights as this rank holds them (load_weights or random_weights).
  LlamaModel(const LlamaConfig& config, ModelWeights weights, const Topology& topology,
             Communicator& tp_comm, DeviceContext ctx, ModelLimits limits);
  // Loads this rank's slice of a checkpoint, matrices held as `dtype`.
  LlamaModel(const Checkpoint& checkpoint, const Topology& topology, Communicator& tp_comm,
             DeviceContext ctx, ModelLimits limits, DType dtype = DType::kF32);

  // Runs this stage over the batch, writing its keys and values into the cache. Returns logits
  // (logit_rows, vocab_local) on the last stage — this rank's vocabulary slice starts at
  // vocab_begin(), padding columns hold -inf — and the hidden states (n_tokens, dim) for the next
  // stage on the others. A stage after the first reads its input from input_hidden().
  // Every tensor it returns lives on the model's device.
  Tensor forward(const StepBatch& batch, KvCache& cache);
  // Where a later stage places the previous stage's hidden states before forward() (on the device:
  // fill it with ops::upload or a communicator's recv).
  Tensor input_hidden(int64_t n_tokens);
  const DeviceContext& context() const { return ctx_; }
  // Pure-decode steps recorded once per (tokens, logit rows) as a CUDA graph and replayed, where
  // the device and the TP communicator allow it (off: every step launches its kernels).
  void use_graphs(bool on) { graphs_on_ = on && ops::graphs_supported(ctx_); }
  // Times every op of the forward into `split` (null: off), each synchronized: slower, and never
  // recorded as a CUDA graph while it is on.
  void split_ops(OpSplit* split) { split_ = split; }
  bool graphs_on() const { return graphs_on_; }

  const LlamaConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const HeadLayout& heads() const { return heads_; }
  const ModelLimits& limits() const { return limits_; }
  int vocab_begin() const { return vocab_begin_; }
  int vocab_local() const { return vocab_local_; }
  int n_layers_local() const { return static_cast<int>(weights_.layers.size()); }
  int kv_dim_local() const { return heads_.n_kv_heads_local * config_.head_dim; }

 private:
  // The step's indices and RoPE tables, staged on the host and uploaded in one copy.
  struct StepViews {
    Tensor tokens, kv_rows, seq, n_ctx, logit_rows;  // i32
    Tensor cos, sin;                                 // (n_tokens, head_dim/2) f32
    Tensor runs;                                     // (n_runs, 2) i32: [first token, length]
    int max_ctx = 0;
    int max_run = 0;
  };
  StepViews stage_step(const StepBatch& batch, const KvCache& cache);
  // The stage's device work for a staged step of n tokens and r logit rows; returns output(n, r).
  Tensor run_stage(const StepViews& step, KvCache& cache, int64_t n, int64_t r);
  // A step's activations: views of the buffers below for its n tokens.
  struct Activations {
    Tensor x;         // (n, dim) residual stream
    Tensor xn;        // (n, dim) a sublayer's output, all-reduced across TP
    Tensor xin;       // (n, dim) the normalised input of a sublayer, in in_dtype_
    Tensor q, k, v;   // (n, n_heads_local*head_dim), (n, kv_dim_local) twice
    Tensor att;       // (n, n_heads_local*head_dim) in in_dtype_
    Tensor gate, up;  // (n, hidden_local)
    Tensor act;       // (n, hidden_local) silu(gate) * up, in in_dtype_
  };
  Activations activations(int64_t n) const;
  // Since the last lap, into split_ under `op` (nothing while split_ is null), with the FLOPs of
  // its matrix products.
  void lap(const char* op, double flops = 0);
  // The sublayers of run_stage, for one of this stage's layers: each adds its output to the
  // residual stream a.x.
  void attention_block(const Activations& a, int layer, const StepViews& step, KvCache& cache,
                       const ops::AttentionShape& shape);
  void feed_forward_block(const Activations& a, int layer);
  // The last stage's logits (r, vocab_local) of the hidden states x (n, dim) at the logit rows.
  Tensor lm_head(const Tensor& x, const StepViews& step, int64_t n, int64_t r);
  // What forward returns: logits (r, vocab_local) on the last stage, hidden states (n, dim) before.
  Tensor output(int64_t n, int64_t r) const;
  // A GEMM input: a view of the f32 buffer where the matmul reads f32, else of its own buffer.
  Tensor gemm_input(const Buffer& separate, const Buffer& f32,
                    std::initializer_list<int64_t> shape) const;

  LlamaConfig config_;
  Topology topology_;
  Communicator& tp_comm_;
  DeviceContext ctx_;
  ModelLimits limits_;
  HeadLayout heads_;
  int vocab_begin_ = 0;
  int vocab_local_ = 0;
  ModelWeights weights_;
  std::vector<double> inv_freq_;  // (head_dim/2)
  DType in_dtype_ = DType::kF32;  // what ops::matmul reads its input as, without converting
  bool graphs_on_ = false;
  OpSplit* split_ = nullptr;
  OpSplit::Phase* phase_ = nullptr;  // the phase of the step being timed
  Clock::time_point lap_start_;      // the last lap
  using GraphKey =
      std::tuple<int64_t, int64_t, const void*>;  // tokens, logit rows, the cache's pools
  std::map<GraphKey, ops::Graph> graphs_;

  // Activations on the device, allocated once for limits_.max_batch_tokens rows.
  Buffer x_;     // (T, dim) residual stream
  Buffer xn_;    // (T, dim) a sublayer's output
  Buffer xin_;   // (max(T, R), dim) normalised input of a sublayer, in in_dtype_ (unless f32: xn_)
  Buffer act_;   // (T, hidden_local) silu(gate) * up in in_dtype_ (unless f32: gate_)
  Buffer q_;     // (T, n_heads_local*head_dim)
  Buffer k_;     // (T, kv_dim_local)
  Buffer v_;     // (T, kv_dim_local)
  Buffer att_;   // (T, n_heads_local*head_dim) in in_dtype_
  Buffer gate_;  // (T, hidden_local)
  Buffer up_;    // (T, hidden_local)
  Buffer step_host_;  // the step's indices and RoPE tables (stage_step), host
  Buffer step_;       // the same, on the device
  Buffer scratch_;    // the ops' temporaries when the runtime's scratch is too small for a step
  Buffer last_;       // (R, dim) hidden states of the logit rows
  Buffer logits_;     // (R, vocab_local)
};

}  // namespace tpllama
