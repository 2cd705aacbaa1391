// The session's phases: validate the layout, open the device, load the shard and the KV cache,
// then serve.
#include "session/session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/byte_size.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "engine/block_pool.h"
#include "executor/pipeline.h"
#include "model/checkpoint.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/model_text.h"
#include "model/weights.h"
#include "ops/device.h"
#include "parallel/communicator.h"
#include "parallel/group_comm.h"
#include "session/engine_flags.h"
#include "session/session_log.h"
#include "session/weight_audit.h"

namespace tpllama {

Session::Session(const MpiSession& mpi, SessionOptions options,
                 const std::function<void(const Session&)>& checks)
    : mpi_(mpi),
      o_(std::move(options)),
      deadline_(o_.engine.grace_seconds),
      nodes_(mpi.detect_nodes()) {
  validate(checks);
  if (is_rank0()) log_layout(*topology_, nodes_, o_.allow_cross_node_tp);
  if (const std::string note = mpirun_stop_note([](const char* name) { return std::getenv(name); });
      is_rank0() && !note.empty())
    log::info(note);
  if (text_) log_model_text(*text_);
}

Session::~Session() = default;

// Everything that can be wrong with the layout, the model or the files is found here, on every
// rank, before any weight is copied; the job reports it once.
void Session::validate(const std::function<void(const Session&)>& checks) {
  collective_phase([&] {
    if (o_.synthetic) {
      config_ = o_.synthetic->config;
      config_.validate();
    } else {
      checkpoint_ = std::make_unique<Checkpoint>(o_.model);
      config_ = checkpoint_->config();
    }
    topology_ = std::make_unique<Topology>(
        make_topology(o_.layout, nodes_, mpi_.world_size(), mpi_.rank(), config_.n_layers));
    if (topology_->dp_size() > 1 && !o_.replicas)
      fail("this command runs one replica of the model, but the layout has ", topology_->dp_size(),
           " (dp ", topology_->dp_size(), " x tp ", topology_->tp_size(), " x pp ",
           topology_->pp_size(), " = ", mpi_.world_size(),
           " ranks): start tp x pp ranks, or use tpllama run");
    if (topology_->dp_size() > 1 && !mpi_.threads_may_call())
      fail("--dp ", topology_->dp_size(),
           " needs an MPI that lets two threads of a rank call it at once (MPI_THREAD_MULTIPLE): "
           "rank 0 hands requests to the replicas beside running its own; this MPI does not");
    if (checkpoint_ && checkpoint_->presharded()) checkpoint_->open_rank_shard(*topology_);
    head_layout(config_, topology_->tp_size(), topology_->tp_rank());
    context_ = resolve_context(o_.engine, config_);
    if (!o_.engine.kv_cache_memory.empty())
      (void)parse_byte_size(o_.engine.kv_cache_memory);  // refused before any weight is read
    if (checks) checks(*this);
    if (topology_->is_replica_leader() && checkpoint_)  // every engine's
      text_ = std::make_unique<ModelText>(o_.model, config_, o_.chat_template);
  });
}

void Session::split_ops(OpSplit* split) {
  TPLLAMA_CHECK(model_ != nullptr, "split_ops before load");
  model_->split_ops(split);
}

std::vector<const Buffer*> Session::weight_buffers() const {
  std::vector<const Buffer*> out;
  if (model_ != nullptr)
    for (const Buffer& b : model_->weights().storage) out.push_back(&b);
  return out;
}

void Session::load(const std::function<void(const Session&)>& on_device) {
  open_device();
  if (on_device) on_device(*this);  // bench's probe gives the rank's threads back itself
  const DType dtype = placement_.dtype;
  const int sharers = placement_.sharers;
  collective_phase(
      [&] { check_weights_placeable(config_, *topology_, device_->context(), dtype, sharers); });
  if (is_rank0()) log_device(*device_, placement_);
  load_model();
  make_kv_cache();
}

// This rank's threads and device: chosen (placement.h), opened, and checked against the node's
// other ranks.
void Session::open_device() {
  placement_ = place_rank(mpi_, *topology_, nodes_, o_.placement, config_.int8_group_size > 0);
  collective_phase([&] {
    device_ = std::make_unique<ops::DeviceRuntime>(placement_.device, placement_.gpu, threads());
  });
}

// Communicators, then this rank's shard of the weights.
void Session::load_model() {
  const auto t0 = Clock::now();
  const DeviceContext& ctx = device_->context();
  comms_ = make_rank_communicators(mpi_, *topology_, placement_.comm, ctx);
  const DType dtype = placement_.dtype;
  collective_phase([&] {
    const EngineFlags& e = o_.engine;
    const ModelLimits limits{e.max_batch_tokens, max_logit_rows(e.max_seqs, e.max_batch_tokens)};
    ModelWeights weights = o_.synthetic
                               ? random_weights(config_, *topology_, ctx, dtype, o_.synthetic->seed)
                               : load_weights(*checkpoint_, *topology_, ctx, dtype);
    model_ = std::make_unique<LlamaModel>(config_, std::move(weights), *topology_, *comms_.tp, ctx,
                                          limits);
    model_->use_graphs(!o_.eager);
  });
  audit_weights(mpi_, *topology_, model_->weights(),
                checkpoint_ ? checkpoint_->total_elements() : config_.parameter_count(),
                checkpoint_ != nullptr);
  if (is_rank0())
    log_model_loaded(checkpoint_ ? o_.model : "(random weights)", *model_, *comms_.tp, dtype,
                     threads(), seconds_since(t0));
}

// The KV pool: every rank's memory gathered to all, and the engine's flags resolved over it
// (engine_flags.h), so that every rank makes the same pool: refused if one full-context sequence
// won't fit on the smallest rank.
void Session::make_kv_cache() {
  const Device device = device_->context().device;
  const DType kv = kv_cache_dtype(o_.kv_dtype, placement_.dtype, device);
  const Clock::time_point t0 = Clock::now();
  RankMemory mine;
  collective_phase([&] {  // a rank that cannot measure its memory fails the job, named, once
    mine.gpu = device == Device::kCuda;
    mine.kv_bytes_per_position =
        KvCache::bytes_per_block(model_->n_layers_local(), model_->kv_dim_local(), 1, kv);
    mine.free = ops::memory_available(model_->context());
    mine.sharers = placement_.sharers;
  });
  std::vector<RankMemory> memory(static_cast<size_t>(mpi_.world_size()));
  mpi_.all_gather(&mine, sizeof mine, memory.data());
  collective_phase([&] { engine_ = resolve(o_.engine, config_, *topology_, memory); });
  const EngineConfig& e = *engine_;
  collective_phase([&] {
    cache_ = std::make_unique<KvCache>(
        model_->n_layers_local(), model_->kv_dim_local(), e.kv_block_size, e.kv_blocks, e.max_seqs,
        model_->context(), static_cast<int>(blocks_per_sequence(e.context, e.kv_block_size)), kv);
  });
  if (is_rank0()) log_kv_cache(*cache_, device_->context().device, context_, seconds_since(t0));
}

RunSummary Session::serve(const ServeOptions& options, EngineIo io, TraceRecorder& trace) {
  TPLLAMA_CHECK(cache_ != nullptr && pipeline_ == nullptr, "serve() once, after load()");
  for (Communicator* c : {comms_.tp.get(), comms_.stage.get(), comms_.world.get()})
    c->set_trace(&trace);
  mpi_.barrier();  // a common time origin for the trace
  trace.set_origin(TraceRecorder::Clock::now());
  pipeline_ = std::make_unique<Pipeline>(*model_, *cache_, *topology_, *comms_.tp, *comms_.stage,
                                         *comms_.world, &trace);
  const Topology& t = *topology_;
  const Continuation& c = options.continuation;
  StallWatch stall(options.stall_timeout, describe_rank(t, nodes_),
                   c.resumable ? "--resume continues from what was written" : c.restart_hint);
  pipeline_->set_stall_watch(&stall);
  RunSummary summary;
  if (topology_->is_replica_leader()) {
    io.how_to_continue = c.resumable ? "resume with --resume" : c.restart_hint;
    io.terminal = ::isatty(STDERR_FILENO) != 0;
    io.trace = &trace;
    if (t.dp_size() > 1) {
      summary = serve_replica(options, io);
    } else {
      Engine engine(config_, text_.get(), *pipeline_, engine_config());
      summary = engine.run(io);
    }
  } else {
    pipeline_->serve();
  }
  pipeline_->set_stall_watch(nullptr);
  return summary;
}

RunSummary Session::serve_replica(const ServeOptions& options, EngineIo io) {
  Communicator& leaders = *comms_.leaders;
  const EngineConfig& e = engine_config();
  std::vector<uint8_t> setup;
  if (is_rank0()) {
    TPLLAMA_CHECK(options.lines != nullptr && options.records != nullptr,
                  "several replicas without the run's input and output");
    setup = encode_replica_requests(options.replica_requests);
  }
  leaders.broadcast_bytes(setup, 0);
  // Each engine holds at most a few requests it has not started: the rest stay with rank 0 for
  // whichever replica has room first.
  const int batch = std::clamp(e.max_seqs / 8, 1, 16);
  std::unique_ptr<Communicator> own = leaders.second_handle();
  ReplicaLink link(*own, decode_replica_requests(setup), options.defaults, batch);
  const EngineIo given = io;
  io.reader = nullptr;
  io.resume = nullptr;
  io.gated = &link;
  io.writer = &link;
  io.ordered = false;   // rank 0 puts the records in order
  io.progress = false;  // rank 0 draws the job's
  std::unique_ptr<Dispatcher> dispatcher;
  std::thread thread;
  if (is_rank0()) {
    DispatchIo d;
    d.reader = options.lines;
    d.writer = options.records;
    d.resume = given.resume;
    d.text = text_.get();
    d.context = e.context;
    d.ordered = given.ordered;
    d.reorder_limit = given.reorder_limit;
    d.total_requests = given.total_requests;
    d.terminal = given.terminal;
    d.log_interval = e.log_interval;
    d.routing = options.routing;
    dispatcher = std::make_unique<Dispatcher>(leaders, d);
    thread = std::thread([&] {
      try {
        dispatcher->run();
      } catch (const std::exception& ex) {
        // The records written so far are whole; every rank ends now (--resume continues).
        log::error(std::string("rank 0, handing requests to the replicas: ") + ex.what());
        mpi_.abort(1);
      }
    });
  }
  RunSummary mine;
  try {
    Engine engine(config_, text_.get(), *pipeline_, e);
    mine = engine.run(io);
    link.finish(mine);
  } catch (...) {
    if (dispatcher) {
      dispatcher->abandon();
      thread.join();
    }
    throw;
  }
  if (!dispatcher) return mine;
  thread.join();
  RunSummary summary = dispatcher->summary();
  for (size_t r = 0; r < summary.replicas.size(); ++r) {
    const ReplicaFigures& f = summary.replicas[r];
    char line[200];
    std::snprintf(line, sizeof line,
                  "replica %zu: %lld requests, %lld generated tokens, %lld steps in %.1f s (%.0f%% "
                  "busy, %.1f s waiting for requests)",
                  r, f.records, f.generated_tokens, f.steps, f.seconds,
                  f.seconds > 0 ? 100 * f.busy_seconds / f.seconds : 0.0, f.waiting_seconds);
    log::info(line);
  }
  return summary;
}

RankFigures Session::rank_figures() const {
  return measure_rank_figures(model_->weights(), *cache_, pipeline_ ? &pipeline_->stats() : nullptr,
                              comms_);
}

DType Session::kv_dtype() const {
  return cache_->dtype();
}

const EngineConfig& Session::engine_config() const {
  TPLLAMA_CHECK(engine_.has_value(), "the engine's configuration is resolved by load()");
  return *engine_;
}

const Tokenizer* Session::tokenizer() const {
  return text_ ? &text_->tokenizer() : nullptr;
}

const DeviceContext& Session::device_context() const {
  TPLLAMA_CHECK(device_ != nullptr, "the device is opened by load()");
  return device_->context();
}

std::string Session::device_description() const {
  return device_ ? device_->describe() : "none";
}

}  // namespace tpllama
