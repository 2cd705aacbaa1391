// Session: what run, bench and perplexity build once, in checked phases, on every rank (config and
// layout, device, communicators, weights, KV cache), and serve(): rank 0 drives the Engine over the
// command's requests while every other rank executes step plans.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/stop_signal.h"
#include "model/config.h"
#include "ops/cpu/threads.h"
#include "parallel/mpi_session.h"
#include "parallel/topology.h"
#include "runtime/engine.h"

namespace tpllama {

class Checkpoint;
class Communicator;
class KvCache;
class LlamaModel;
class MpiCommunicator;
class Pipeline;
class ModelText;
class Tokenizer;
class TraceRecorder;
enum class CommBackend;
namespace ops {
class DeviceRuntime;
}

// A model without files: a named shape with seeded random weights (benchmarks).
struct SyntheticModel {
  LlamaConfig config;
  uint64_t seed = 0;
};

// How a session lays the model out over ranks, devices and memory (the layout flags of run,
// bench and perplexity).
struct SessionOptions {
  std::string model;                        // Hugging Face directory (or a shard set); unused when synthetic
  std::optional<SyntheticModel> synthetic;  // random weights of a named shape instead
  std::string chat_template;                // --chat-template: a file replacing the model's template
  LayoutRequest layout;
  bool allow_cross_node_tp = false;
  int threads = 0;                // 0: cores of the node / ranks on the node
  std::string device = "auto";    // cpu, cuda, or auto (cuda when built in and a GPU is visible)
  std::string comm = "auto";      // mpi, nccl, or auto (nccl on GPUs unless they are shared)
  bool share_gpus = false;        // let several ranks use one GPU (with --comm mpi)
  bool eager = false;             // no CUDA graphs: every step launches its kernels
  std::string dtype = "auto";     // weight matrices: f32, bf16, int8 (CPU), or auto (bf16 on a GPU)
  std::string kv_dtype = "auto";  // KV cache: f32, bf16, or auto (bf16 on a GPU with bf16 weights)
  int max_seqs = 64;
  int max_batch_tokens = 2048;
  int kv_block_size = 16;
  bool prefix_caching = true;   // reuse computed full KV blocks across requests (BlockAllocator)
  std::string kv_cache_memory;  // bytes per rank, e.g. "8GiB"; empty: a share of free memory
  int max_model_len = 0;        // 0: max_position_embeddings
  // The context the command's requests need (perplexity's window), when below the model's: the KV
  // cache is sized for it, and a cache too small names `context_flag`, the flag that sets it.
  int context_len = 0;
  std::string context_flag = "--max-model-len";
  // After a stop signal: how long running requests may still run; a stop that a stalled rank holds
  // up ends the job this long (+10 s) after the signal.
  double grace_seconds = 90;
};

// The --dtype weights are held in on a device (auto: bf16 on a GPU, f32 on the CPU; an int8
// checkpoint int8 on the CPU, bf16 on a GPU).
DType weight_dtype(const std::string& dtype, Device device, bool int8_checkpoint);
// The --kv-dtype of the KV cache (auto: bf16 on a GPU with bf16 weights, else f32).
DType kv_cache_dtype(const std::string& kv_dtype, DType weights, Device device);

// Whether a stopped run continues with --resume, and what to do next when it cannot.
struct Continuation {
  bool resumable = true;
  std::string restart_hint;  // when not resumable
};

// How rank 0 serves the requests (a command's own flags beside the session's).
struct ServeOptions {
  double log_interval = 30.0;  // seconds between progress lines when stderr is not a terminal
  double stall_timeout = 900;  // seconds without a pipeline step before the job ends; 0: never
  Continuation continuation;
};

// One rank's figures for the end-of-run report (gathered on rank 0 as plain doubles).
struct RankFigures {
  double peak_memory_bytes = 0;
  double weight_bytes = 0;
  double matrix_bytes = 0;  // packed matrices: the weight bytes a decode step reads
  double kv_cache_bytes = 0;
  double kv_capacity_tokens = 0;
  double compute_seconds = 0;
  double wait_seconds = 0;
  double collective_seconds = 0;
  double p2p_seconds = 0;
  double all_reduce_seconds = 0;
  double all_reduce_bytes = 0;
  double all_reduce_calls = 0;
  double steps = 0;
};

class Session {
 public:
  // Phase 1, on every rank: the config (or the synthetic model's), the layout and whether the model
  // fits it; on rank 0 the tokenizer. `checks` then runs in the same phase (a command's own files),
  // so that any mistake is reported before a weight is read.
  Session(const MpiSession& mpi, SessionOptions options, const std::function<void(const Session&)>& checks = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Phases 2 and 3: this rank's threads and device (checked against its node's other ranks and its
  // free memory), then `on_device` on every rank (bench measures the device's limits there: the
  // first rank on each device, first_on_device()), then the communicators, this rank's shard of the
  // weights and the KV cache.
  void load(const std::function<void(const Session&)>& on_device = {});

  // Runs the pipeline until rank 0's engine has served every request of io (rank 0; io is ignored
  // elsewhere) and shut it down. Returns rank 0's summary (an empty one elsewhere).
  RunSummary serve(const ServeOptions& options, EngineIo io, TraceRecorder& trace);

  // This rank's figures after serve() (memory, weights, cache, time split, collectives).
  RankFigures rank_figures() const;

  const MpiSession& mpi() const { return mpi_; }
  bool is_rank0() const { return mpi_.rank() == 0; }
  const SessionOptions& options() const { return o_; }
  const LlamaConfig& config() const { return config_; }
  const Topology& topology() const { return *topology_; }
  const NodeInfo& nodes() const { return nodes_; }
  // Rank 0, a model with files: its tokenizer and chat template (null elsewhere and for a synthetic
  // model).
  const ModelText* text() const { return text_.get(); }
  const Tokenizer* tokenizer() const;
  // Tokens per sequence, prompt + completion: the model's, or less by --max-model-len or the command.
  int context() const { return context_; }
  // After load():
  const DeviceContext& device_context() const;
  std::string device_description() const;
  bool first_on_device() const { return first_on_device_; }
  int threads() const { return threads_; }
  DType dtype() const { return dtype_; }
  DType kv_dtype() const;
  int kv_blocks() const { return n_blocks_; }

 private:
  void validate(const std::function<void(const Session&)>& checks);
  void log_layout() const;
  void open_device();
  void load_model();
  void report_weights() const;
  void make_kv_cache();

  const MpiSession& mpi_;
  SessionOptions o_;
  StopDeadline deadline_;  // a stop that a stalled rank holds up ends the job
  NodeInfo nodes_;
  LlamaConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;  // null for a synthetic model
  std::unique_ptr<Topology> topology_;
  std::unique_ptr<ModelText> text_;  // rank 0
  int context_ = 0;
  int threads_ = 1;
  ops::cpu::ThreadPlacement placement_;
  std::unique_ptr<ops::DeviceRuntime> device_;
  int device_sharers_ = 1;  // ranks of this node on this rank's device (its memory is theirs)
  bool first_on_device_ = true;
  DType dtype_ = DType::kF32;
  CommBackend comm_{};           // how tensors move: chosen with the device
  uint64_t kv_cache_bytes_ = 0;  // --kv-cache-memory; 0: a share of the free memory
  // Members are destroyed in reverse order: the pipeline, cache and model before the communicators
  // they use.
  std::unique_ptr<MpiCommunicator> world_;
  std::unique_ptr<Communicator> tp_comm_;
  std::unique_ptr<Communicator> stage_comm_;  // this TP rank through the stages: hidden states
  std::unique_ptr<LlamaModel> model_;
  int n_blocks_ = 0;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Pipeline> pipeline_;
};

}  // namespace tpllama
