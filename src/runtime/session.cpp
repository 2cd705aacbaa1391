// The session's phases: validate the layout, open the device, load the shard and the KV cache,
// then serve.
#include "runtime/session.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/byte_size.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "model/checkpoint.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/weights.h"
#include "ops/cpu/gemm.h"
#include "ops/device.h"
#include "ops/graph.h"
#include "parallel/communicator.h"
#include "parallel/group_comm.h"
#include "parallel/mpi_comm.h"
#include "runtime/model_text.h"
#include "runtime/pipeline.h"

namespace tpllama {
namespace {

void warn_cross_node_tp(const Topology& t, const NodeInfo& nodes) {
  for (int stage = 0; stage < t.pp_size(); ++stage) {
    const int first = stage * t.tp_size();
    bool spans = false;
    std::string members;
    for (int r = first; r < first + t.tp_size(); ++r) {
      spans = spans || nodes.node_of_rank[static_cast<size_t>(r)] != nodes.node_of_rank[static_cast<size_t>(first)];
      members += (r == first ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " +
                 nodes.host_of_rank[static_cast<size_t>(r)];
    }
    if (spans)
      log::warn("the TP group of stage " + std::to_string(stage) + " spans nodes (" + members +
                "): its all-reduces cross the network. Place consecutive ranks on one node (mpirun --map-by "
                "slot) or pass --allow-cross-node-tp to silence this");
  }
}

// The memory check made before loading: this rank's weights as it will hold them against its share
// of its device's free memory.
void check_weights_fit(const LlamaConfig& config, const Topology& topology, const DeviceContext& ctx, DType dtype,
                       int sharers) {
  const uint64_t bytes = held_weight_bytes(config, topology, ctx, dtype);
  const uint64_t available = ops::memory_available(ctx) / static_cast<uint64_t>(std::max(1, sharers));
  const bool cpu = ctx.device == Device::kCpu;
  if (available > 0 && bytes > available)
    fail("rank ", topology.rank(), " would hold ", mib(static_cast<double>(bytes)), " of weights (", dtype_name(dtype),
         " matrices on the ", cpu ? "CPU" : "GPU", ") but has ", mib(static_cast<double>(available)), " of free ",
         cpu ? "host" : "GPU", " memory (", sharers,
         " ranks share it): spread the model over more ranks (--tp/--pp) or nodes, hold it as "
         "--dtype bf16, or use a device with more memory");
}

}  // namespace

DType weight_dtype(const std::string& dtype, Device device, bool int8_checkpoint) {
  if (dtype == "auto") return device != Device::kCpu ? DType::kBF16 : int8_checkpoint ? DType::kI8 : DType::kF32;
  if (dtype == "int8") return DType::kI8;
  return dtype == "bf16" ? DType::kBF16 : DType::kF32;
}

DType kv_cache_dtype(const std::string& kv_dtype, DType weights, Device device) {
  if (kv_dtype == "auto") return device != Device::kCpu && weights == DType::kBF16 ? DType::kBF16 : DType::kF32;
  return kv_dtype == "bf16" ? DType::kBF16 : DType::kF32;
}

Session::Session(const MpiSession& mpi, SessionOptions options, const std::function<void(const Session&)>& checks)
    : mpi_(mpi), o_(std::move(options)), deadline_(o_.grace_seconds), nodes_(mpi.detect_nodes()) {
  validate(checks);
  if (is_rank0()) log_layout();
  if (const std::string note = mpirun_stop_note([](const char* name) { return std::getenv(name); });
      is_rank0() && !note.empty())
    log::info(note);
  if (text_)
    log::info("tokenizer: " + text_->tokenizer().path() + " (" + std::to_string(text_->tokenizer().vocab_size()) +
              " tokens); chat template: " +
              (text_->has_chat_template() ? text_->chat_template_source() : std::string("none")) +
              "; stop ids: " + text_->stop_ids_origin());
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
    if (checkpoint_ && checkpoint_->presharded()) checkpoint_->open_rank_shard(*topology_);
    head_layout(config_, topology_->tp_size(), topology_->tp_rank());
    if (o_.max_model_len > config_.max_seq_len)
      fail("--max-model-len ", o_.max_model_len, " exceeds the model's context of ", config_.max_seq_len,
           " tokens (max_position_embeddings)");
    if (!o_.kv_cache_memory.empty()) kv_cache_bytes_ = parse_byte_size(o_.kv_cache_memory);  // before any weight is read
    context_ = o_.max_model_len > 0 ? std::min(o_.max_model_len, config_.max_seq_len) : config_.max_seq_len;
    if (o_.context_len > 0) context_ = std::min(context_, o_.context_len);
    if (checks) checks(*this);
    if (is_rank0() && checkpoint_) text_ = std::make_unique<ModelText>(o_.model, config_, o_.chat_template);
  });
}

void Session::log_layout() const {
  const Topology& t = *topology_;
  std::string hosts;  // "host (ranks a-b)" per node, from the ranks' own processor names
  for (int r = 0; r < t.world_size();) {
    int last = r;
    while (last + 1 < t.world_size() &&
           nodes_.node_of_rank[static_cast<size_t>(last + 1)] == nodes_.node_of_rank[static_cast<size_t>(r)])
      ++last;
    if (!hosts.empty()) hosts += ", ";
    hosts.append(nodes_.host_of_rank[static_cast<size_t>(r)]).append(" (ranks ").append(std::to_string(r));
    if (last > r) hosts.append("-").append(std::to_string(last));
    hosts += ")";
    r = last + 1;
  }
  log::info("layout: " + std::to_string(t.world_size()) + " ranks = tp " + std::to_string(t.tp_size()) + " x pp " +
            std::to_string(t.pp_size()) + " on " + std::to_string(nodes_.n_nodes) + " node(s): " + hosts);
  if (!o_.allow_cross_node_tp) warn_cross_node_tp(t, nodes_);
}

void Session::load(const std::function<void(const Session&)>& on_device) {
  open_device();
  if (on_device) {
    on_device(*this);
    ops::cpu::apply_threads(placement_);  // the hook may have spread this rank over the node to measure it
  }
  collective_phase([&] {
    if (dtype_ == DType::kI8 && config_.int8_group_size > 0)
      check_int8_slices(config_, *topology_, "this int8 checkpoint",
                        "run it with --dtype bf16 or f32, which hold its matrices as q x scale");
    else if (dtype_ == DType::kI8)
      check_int8_slices(config_, *topology_);
    check_weights_fit(config_, *topology_, device_->context(), dtype_, device_sharers_);
  });
  if (is_rank0()) {
    const bool gpu = device_->context().device == Device::kCuda;
    log::info("device: rank 0 on " + device_->describe() + "; TP and stage tensors over " +
              (comm_ == CommBackend::kNccl ? "NCCL" : !gpu ? "MPI" : "MPI, staged through host memory") +
              (device_sharers_ > 1 && gpu ? "; " + std::to_string(device_sharers_) + " ranks share its GPU" : ""));
  }
  load_model();
  make_kv_cache();
}

// This rank's threads and device: chosen, opened, and checked against the node's other ranks.
void Session::open_device() {
  placement_ = ops::cpu::plan_threads(o_.threads, nodes_.local_rank, nodes_.ranks_on_node);
  ops::cpu::apply_threads(placement_);
  threads_ = placement_.threads;
  if (placement_.oversubscribed)
    log::warn("rank " + std::to_string(topology_->rank()) + ": " + placement_.note);
  else if (!placement_.note.empty() && is_rank0())
    log::info(placement_.note);
  const std::string& host = nodes_.host_of_rank[static_cast<size_t>(topology_->rank())];
  Device device = Device::kCpu;
  int gpu = -1, gpus = 0;
  std::string identity = "cpu";
  collective_phase([&] {
    gpus = ops::gpu_count();
    if (o_.device == "cuda" && gpus == 0)
      fail("--device cuda, but rank ", topology_->rank(), " on ", host, " sees no GPU (",
           ops::cuda_built() ? "check CUDA_VISIBLE_DEVICES and the job's GPU allocation"
                             : "this build has no CUDA: configure with -DTPLLAMA_CUDA=ON where nvcc is installed",
           "), or run with --device cpu");
    if (o_.device == "cuda" || (o_.device == "auto" && gpus > 0)) device = Device::kCuda;
    if (device == Device::kCpu && o_.comm == "nccl") fail("--comm nccl needs GPUs; this run is on the CPU");
    if (device == Device::kCuda) {
      gpu = nodes_.local_rank % gpus;
      identity = ops::gpu_uuid(gpu);
    }
  });
  // The ranks of this node whose device has the same identity (every rank of the node on the CPU).
  const std::vector<std::string> identities = mpi_.all_gather_text(identity);
  std::vector<int> sharers;
  const int me = topology_->rank();
  for (int r = 0; r < topology_->world_size(); ++r)
    if (nodes_.node_of_rank[static_cast<size_t>(r)] == nodes_.node_of_rank[static_cast<size_t>(me)] &&
        identities[static_cast<size_t>(r)] == identities[static_cast<size_t>(me)])
      sharers.push_back(r);
  device_sharers_ = static_cast<int>(sharers.size());
  first_on_device_ = sharers.front() == me;
  collective_phase([&] {
    if (device == Device::kCuda && sharers.size() > 1) {
      std::string list;
      for (int r : sharers) list += (list.empty() ? "" : ", ") + std::to_string(r);
      if (!o_.share_gpus)
        fail("ranks ", list, " on ", host, " would share GPU ", gpu, " (", nodes_.ranks_on_node, " ranks on the node, ",
             gpus, " GPUs visible): start one rank per GPU, or pass --share-gpus --comm mpi to let them share");
      if (o_.comm == "nccl") fail("ranks ", list, " share one GPU, which NCCL cannot do: use --comm mpi");
    }
    comm_ = o_.comm == "auto" ? (device == Device::kCuda && !o_.share_gpus ? CommBackend::kNccl : CommBackend::kMpi)
                              : parse_comm_backend(o_.comm);
    const bool int8_checkpoint = config_.int8_group_size > 0;
    dtype_ = weight_dtype(o_.dtype, device, int8_checkpoint);
    if (dtype_ == DType::kI8 && device != Device::kCpu)
      fail(
          "--dtype int8 runs on the CPU only: there are no GPU kernels for int8 weights yet. On a GPU use "
          "--dtype bf16 (or auto",
          int8_checkpoint ? ", which holds this int8 checkpoint's weights as bf16" : "",
          "), or run on the CPU with --device cpu");
    if (int8_checkpoint && dtype_ != DType::kI8 && is_rank0())
      log::info("the int8 checkpoint's matrices are held as " + std::string(dtype_name(dtype_)) + ", q x scale" +
                (device != Device::kCpu ? ": there are no GPU kernels for int8 yet" : ""));
    device_ = std::make_unique<ops::DeviceRuntime>(device, gpu, threads_);
  });
}

// Communicators, then this rank's shard of the weights.
void Session::load_model() {
  const auto t0 = Clock::now();
  world_ = mpi_.duplicate_world();
  const DeviceContext& ctx = device_->context();
  tp_comm_ = make_group_communicator(mpi_.split(topology_->pp_rank(), topology_->tp_rank()), comm_, ctx, "TP group");
  stage_comm_ =
      make_group_communicator(mpi_.split(topology_->tp_rank(), topology_->pp_rank()), comm_, ctx, "stage group");
  collective_phase([&] {
    const ModelLimits limits{o_.max_batch_tokens, max_logit_rows(o_.max_seqs, o_.max_batch_tokens)};
    ModelWeights weights = o_.synthetic ? random_weights(config_, *topology_, ctx, dtype_, o_.synthetic->seed)
                                        : load_weights(*checkpoint_, *topology_, ctx, dtype_);
    model_ = std::make_unique<LlamaModel>(config_, std::move(weights), *topology_, *tp_comm_, ctx, limits);
    model_->use_graphs(!o_.eager);
  });
  report_weights();
  if (!is_rank0()) return;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "model " << (checkpoint_ ? o_.model : "(random weights)") << ": " << config_.n_layers << " layers, dim "
     << config_.dim << ", " << config_.n_heads << " heads (" << config_.n_kv_heads << " kv), vocab "
     << config_.vocab_size << ", context " << config_.max_seq_len << "; loaded in " << seconds_since(t0) << " s; "
     << threads_ << " threads per rank; weights " << dtype_name(dtype_);
  if (ctx.device == Device::kCpu) os << ", GEMM kernel " << ops::cpu::gemm_kernel_name();
  if (dtype_ == DType::kI8)
    os << " (int8: " << ops::cpu::int8_kernel_name(1) << " at decode, "
       << ops::cpu::int8_kernel_name(ops::cpu::kInt8QuantizedRows) << " from " << ops::cpu::kInt8QuantizedRows
       << " rows)";
  if (ops::graphs_supported(ctx))
    os << "; decode steps " << (model_->graphs_on() && tp_comm_->graph_capturable() ? "as CUDA graphs" : "launched eagerly");
  log::info(os.str());
  // Measured with gemm_int8_bench --portable: the portable int8 kernels run 2-34 times slower than
  // the portable f32 ones; int8 then only saves memory.
  if (dtype_ == DType::kI8 && !ops::cpu::avx512_kernels())
    log::warn(
        "this CPU has no AVX-512, so --dtype int8 runs portable kernels, several times slower than --dtype "
        "f32 or bf16 here: use int8 only to fit the model in memory");
}

// Every rank's read/held bytes on rank 0, and the check that every element is held once (against
// the checkpoint, or the config's parameter count for a synthetic model).
void Session::report_weights() const {
  const ModelWeights& w = model_->weights();
  const uint64_t mine[4] = {w.bytes_read, w.bytes_held, w.elements_unique, w.elements_replicated};
  const Topology& t = *topology_;
  std::vector<uint64_t> all(is_rank0() ? 4 * static_cast<size_t>(t.world_size()) : 0);
  mpi_.gather_to_root(mine, sizeof mine, all.data());
  if (!is_rank0()) return;
  uint64_t unique = 0, replicated = 0;
  for (int r = 0; r < t.world_size(); ++r) {
    const uint64_t* v = all.data() + 4 * r;
    std::ostringstream os;
    os << "rank " << r << " (tp " << t.tp_rank_of(r) << ", pp " << t.pp_rank_of(r) << ", layers ["
       << t.stage_layers(t.pp_rank_of(r)).begin << ", " << t.stage_layers(t.pp_rank_of(r)).end << ")): read "
       << mib(static_cast<double>(v[0])) << ", holds " << mib(static_cast<double>(v[1]));
    if (t.world_size() > 1) log::info(os.str());
    unique += v[2];
    replicated += v[3];
  }
  const uint64_t total = checkpoint_ ? checkpoint_->total_elements() : config_.parameter_count();
  std::ostringstream os;
  os << "weights: " << (checkpoint_ ? "checkpoint " : "model (random) ") << total
     << " elements; held once over all ranks " << unique << (unique == total ? " (all of them)" : " (MISMATCH)")
     << ", plus " << replicated << " replicated (norms on every TP rank, shared kv heads, tied embedding on two stages)";
  log::info(os.str());
  TPLLAMA_CHECK(unique == total, "sharded load holds ", unique, " of ", total, " elements");
}

// The KV pool: the same block count on every rank, refused if one full-context sequence won't fit.
void Session::make_kv_cache() {
  const DType kv = kv_cache_dtype(o_.kv_dtype, dtype_, device_->context().device);
  const Clock::time_point t0 = Clock::now();
  long long blocks = 0;
  collective_phase([&] {
    // Each rank's budget over its own block size, never more than every slot at full context needs;
    // the minimum over ranks is every rank's (rank 0 hands out block ids for all of them).
    const uint64_t per_block =
        KvCache::bytes_per_block(model_->n_layers_local(), model_->kv_dim_local(), o_.kv_block_size, kv);
    const uint64_t budget =
        kv_cache_bytes_ > 0
            ? kv_cache_bytes_
            : static_cast<uint64_t>(0.8 * static_cast<double>(ops::memory_available(model_->context())) /
                                    std::max(1, device_sharers_));
    const long long most =
        static_cast<long long>(o_.max_seqs) * ((context_ + o_.kv_block_size - 1) / o_.kv_block_size);
    blocks = std::min<long long>(most, static_cast<long long>(budget / std::max<uint64_t>(per_block, 1)));
    // An explicit budget is what the user asked for, but not past what the device has free now.
    const uint64_t wanted = static_cast<uint64_t>(blocks) * per_block;
    const uint64_t free = ops::memory_available(model_->context()) / static_cast<uint64_t>(std::max(1, device_sharers_));
    if (kv_cache_bytes_ > 0 && free > 0 && wanted > free)
      fail("--kv-cache-memory ", o_.kv_cache_memory, ": rank ", topology_->rank(), " would hold a KV cache of ",
           mib(static_cast<double>(wanted)), " but has ", mib(static_cast<double>(free)), " of free memory left after ",
           "the weights: give a smaller --kv-cache-memory, or leave it out to use ", "80% of what is free");
  });
  n_blocks_ = static_cast<int>(std::min<long long>(mpi_.min(blocks), INT32_MAX));
  collective_phase([&] {
    const int full = (context_ + o_.kv_block_size - 1) / o_.kv_block_size;
    if (n_blocks_ < full)
      fail("the KV cache holds ", n_blocks_, " blocks of ", o_.kv_block_size,
           " tokens on the smallest rank, less than one ", context_, "-token sequence needs (", full,
           "): give more --kv-cache-memory or a smaller ", o_.context_flag);
    cache_ = std::make_unique<KvCache>(model_->n_layers_local(), model_->kv_dim_local(), o_.kv_block_size, n_blocks_,
                                       o_.max_seqs, model_->context(), full, kv);
  });
  if (!is_rank0()) return;
  std::ostringstream os;
  os << "KV cache (" << dtype_name(cache_->dtype()) << "): " << n_blocks_ << " blocks of "
     << o_.kv_block_size << " tokens = " << static_cast<long long>(n_blocks_) * o_.kv_block_size
     << " tokens (" << mib(static_cast<double>(cache_->bytes())) << " on rank 0), room for "
     << static_cast<long long>(KvCache::sequences_held(n_blocks_, o_.kv_block_size, context_))
     << " sequences at the full context of " << context_ << " tokens; set up in " << std::fixed
     << std::setprecision(2) << seconds_since(t0) << " s"
     << (device_->context().device == Device::kCpu ? ", its pages taken as blocks are first written"
                                                   : "");
  log::info(os.str());
  if (o_.kv_block_size > context_)
    log::warn("--kv-block-size " + std::to_string(o_.kv_block_size) + " is larger than the context of " +
              std::to_string(context_) + " tokens: every sequence takes a whole block, most of it unused");
}

RunSummary Session::serve(const ServeOptions& options, EngineIo io, TraceRecorder& trace) {
  TPLLAMA_CHECK(cache_ != nullptr && pipeline_ == nullptr, "serve() once, after load()");
  tp_comm_->set_trace(&trace);
  stage_comm_->set_trace(&trace);
  world_->set_trace(&trace);
  mpi_.barrier();  // a common time origin for the trace
  trace.set_origin(TraceRecorder::Clock::now());
  pipeline_ = std::make_unique<Pipeline>(*model_, *cache_, *topology_, *tp_comm_, *stage_comm_, *world_, &trace);
  const Topology& t = *topology_;
  const Continuation& c = options.continuation;
  StallWatch stall(options.stall_timeout,
                   "rank " + std::to_string(t.rank()) + " (stage " + std::to_string(t.pp_rank()) + ", tp rank " +
                       std::to_string(t.tp_rank()) + ") on " + nodes_.host_of_rank[static_cast<size_t>(t.rank())],
                   c.resumable ? "--resume continues from what was written" : c.restart_hint);
  pipeline_->set_stall_watch(&stall);
  RunSummary summary;
  if (is_rank0()) {
    EngineOptions e;
    e.max_seqs = o_.max_seqs;
    e.max_batch_tokens = o_.max_batch_tokens;
    e.log_interval = options.log_interval;
    e.groups = t.pp_size();
    e.context = context_;
    e.kv_block_size = o_.kv_block_size;
    e.kv_blocks = n_blocks_;
    e.max_logit_rows = max_logit_rows(o_.max_seqs, o_.max_batch_tokens);
    e.prefix_caching = o_.prefix_caching;
    e.grace_seconds = o_.grace_seconds;
    e.how_to_continue = c.resumable ? "resume with --resume" : c.restart_hint;
    io.terminal = ::isatty(STDERR_FILENO) != 0;
    io.trace = &trace;
    Engine engine(config_, text_.get(), *pipeline_, e);
    summary = engine.run(io);
  } else {
    pipeline_->serve();
  }
  pipeline_->set_stall_watch(nullptr);
  return summary;
}

RankFigures Session::rank_figures() const {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  RankFigures f;
  const ModelWeights& weights = model_->weights();
  f.peak_memory_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
  f.weight_bytes = static_cast<double>(weights.bytes_held);
  f.matrix_bytes = static_cast<double>(weights.matrix_bytes);
  f.kv_cache_bytes = static_cast<double>(cache_->bytes());
  f.kv_capacity_tokens = static_cast<double>(cache_->n_blocks()) * cache_->block_size();
  if (pipeline_) {
    f.compute_seconds = pipeline_->stats().compute_seconds;
    f.wait_seconds = pipeline_->stats().wait_seconds;
    f.steps = static_cast<double>(pipeline_->stats().steps);
  }
  const Communicator* comms[] = {tp_comm_.get(), stage_comm_.get(), world_.get()};
  for (const Communicator* c : comms) {
    const CommStats& s = c->stats();
    f.collective_seconds += s.collective_seconds;
    f.p2p_seconds += s.p2p_seconds;
    f.all_reduce_seconds += s.all_reduce_seconds;
    f.all_reduce_bytes += s.all_reduce_bytes;
    f.all_reduce_calls += static_cast<double>(s.all_reduce_calls);
  }
  return f;
}

DType Session::kv_dtype() const { return cache_->dtype(); }

const Tokenizer* Session::tokenizer() const { return text_ ? &text_->tokenizer() : nullptr; }

const DeviceContext& Session::device_context() const {
  TPLLAMA_CHECK(device_ != nullptr, "the device is opened by load()");
  return device_->context();
}

std::string Session::device_description() const { return device_ ? device_->describe() : "none"; }

}  // namespace tpllama
