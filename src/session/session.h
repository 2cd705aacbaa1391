// Session: what run, bench and perplexity build once, in checked phases, on every rank (config and
// layout, device, communicators, weights, KV cache), and serve(): rank 0 drives the Engine over the
// command's requests while every other rank executes step plans.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/dtype.h"
#include "core/stop_signal.h"
#include "engine/engine.h"
#include "model/config.h"
#include "parallel/mpi_session.h"
#include "parallel/topology.h"
#include "session/engine_flags.h"
#include "session/placement.h"
#include "session/rank_figures.h"
#include "session/replicas.h"

namespace tpllama {

class Checkpoint;
class Communicator;
class KvCache;
class LlamaModel;
struct OpSplit;
class Pipeline;
class ModelText;
class Tokenizer;
class TraceRecorder;
namespace ops {
class DeviceRuntime;
}

// A model without files: a named shape with seeded random weights (benchmarks).
struct SyntheticModel {
  LlamaConfig config;
  uint64_t seed = 0;
};

// How a session lays the model out over ranks, devices and memory (the layout flags of run,
// bench and perplexity), typed as the CLI parsed them.
struct SessionOptions {
  std::string model;  // Hugging Face directory (or a shard set); unused when synthetic
  std::optional<SyntheticModel> synthetic;  // random weights of a named shape instead
  std::string chat_template;  // --chat-template: a file replacing the model's template
  LayoutRequest layout;
  bool allow_cross_node_tp = false;
  PlacementOptions placement;  // threads, device, communicators, weights' dtype
  // The KV cache's dtype: f32, bf16, or auto (bf16 on a GPU with bf16 weights).
  DTypeChoice kv_dtype = DTypeChoice::kAuto;
  bool eager = false;  // no CUDA graphs: every step launches its kernels
  // The engine's flags (grace_seconds: after a stop signal, how long running requests may still
  // run; a stop that a stalled rank holds up ends the job this long + 10 s after the signal),
  // resolved by load() into engine_config().
  EngineFlags engine;
  bool replicas = false;  // the command serves several replicas (run): --dp above 1 is allowed
};

// Whether a stopped run continues with --resume, and what to do next when it cannot.
struct Continuation {
  bool resumable = true;
  std::string restart_hint;  // when not resumable
};

// How rank 0 serves the requests (a command's own flags beside the session's).
struct ServeOptions {
  double stall_timeout = 900;  // seconds without a pipeline step before the job ends; 0: never
  Continuation continuation;
  // Several replicas (run): rank 0's input and output, which its dispatcher reads and writes (io's
  // reader and writer are then unused), and what the leaders need to read and write as it does;
  // defaults: the command line's request defaults, on every rank.
  PromptReader* lines = nullptr;
  ResultWriter* records = nullptr;
  ReplicaRequests replica_requests;
  RequestDefaults defaults;
  DpRouting routing = DpRouting::kPrefix;  // --dp-routing
};

class Session {
 public:
  // Phase 1, on every rank: the config (or the synthetic model's), the layout and whether the model
  // fits it; on rank 0 the tokenizer. `checks` then runs in the same phase (a command's own files),
  // so that any mistake is reported before a weight is read.
  Session(const MpiSession& mpi, SessionOptions options,
          const std::function<void(const Session&)>& checks = {});
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
  // Tokens per sequence, prompt + completion: the model's, or less by --max-model-len or the
  // command.
  int context() const { return context_; }
  // After load(): the engine's flags resolved (EngineFlags, resolve) on every rank.
  const EngineConfig& engine_config() const;
  // After load():
  const DeviceContext& device_context() const;
  std::string device_description() const;
  bool first_on_device() const { return placement_.first_on_device; }
  int threads() const { return placement_.threads.threads; }
  const ops::ThreadPlacement& thread_placement() const { return placement_.threads; }
  // After load: times this rank's forward op by op into `split` (LlamaModel::split_ops).
  void split_ops(OpSplit* split);
  // After load: the buffers of this rank's weights (bench reads them to bound decode's bandwidth).
  std::vector<const Buffer*> weight_buffers() const;
  DType dtype() const { return placement_.dtype; }
  DType kv_dtype() const;

 private:
  void validate(const std::function<void(const Session&)>& checks);
  void open_device();
  void load_model();
  void make_kv_cache();
  // serve() with several replicas: rank 0's dispatcher thread beside its engine; every leader's
  // engine over its link to rank 0.
  RunSummary serve_replica(const ServeOptions& options, EngineIo io);

  const MpiSession& mpi_;
  SessionOptions o_;
  StopDeadline deadline_;  // a stop that a stalled rank holds up ends the job
  NodeInfo nodes_;
  LlamaConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;  // null for a synthetic model
  std::unique_ptr<Topology> topology_;
  std::unique_ptr<ModelText> text_;  // rank 0
  int context_ = 0;
  Placement placement_;  // threads, device, backend, weights' dtype
  std::unique_ptr<ops::DeviceRuntime> device_;
  // Members are destroyed in reverse order: the pipeline, cache and model before the communicators
  // they use.
  RankCommunicators comms_;
  std::unique_ptr<LlamaModel> model_;
  std::optional<EngineConfig> engine_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Pipeline> pipeline_;
};

}  // namespace tpllama
