// `tpllama run`: agree on a layout, load this rank's shard, then rank 0 streams the prompt file
// through the pipeline while every other rank serves step plans.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/output_files.h"
#include "app/run_report.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "model/checkpoint.h"
#include "model/llama_model.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/threads.h"
#include "ops/ops.h"
#include "parallel/group_comm.h"
#include "parallel/mpi_comm.h"
#include "io/resume.h"
#include "runtime/engine.h"
#include "runtime/pipeline.h"
#include "runtime/tokenizer.h"

namespace tpllama {
namespace {

// Whether a stopped run continues with --resume: run's always does; another command's says.
bool resumable(const RunHooks* hooks) { return hooks == nullptr || hooks->resumable; }

std::string mib(uint64_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return os.str();
}

// Hugging Face tokenizer_config.json may turn BOS off ("add_bos_token": false); LLaMA default is on.
bool tokenizer_adds_bos(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer_config.json";
  std::ifstream in(path);
  if (!in) return true;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    log::warn(path + " is not a JSON object: ignored, so a BOS token is prepended to every prompt");
    return true;
  }
  auto add = j.find("add_bos_token");
  if (add == j.end() || add->is_null()) return true;
  if (!add->is_boolean()) {
    log::warn(path + ": add_bos_token is " + add->dump() + ", not true or false: ignored, so a BOS token is prepended");
    return true;
  }
  return add->get<bool>();
}

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

// Logit rows a step may ask for: a decode row per sequence, and scored continuation tokens.
int max_logit_rows(const RunOptions& o) { return std::max(o.max_seqs, std::min(o.max_batch_tokens, 512)); }

// The memory check run makes before loading: this rank's weights as it will hold them against its
// share of its device's free memory.
void check_weights_fit(const LlamaConfig& config, const Topology& topology, const DeviceContext& ctx, DType dtype,
                       int sharers) {
  const uint64_t bytes = held_weight_bytes(config, topology, ctx, dtype);
  const uint64_t available = ops::memory_available(ctx) / static_cast<uint64_t>(std::max(1, sharers));
  const bool cpu = ctx.device == Device::kCpu;
  if (available > 0 && bytes > available)
    fail("rank ", topology.rank(), " would hold ", mib(bytes), " of weights (", dtype_name(dtype), " matrices on the ",
         cpu ? "CPU" : "GPU", ") but has ", mib(available), " of free ", cpu ? "host" : "GPU", " memory (", sharers,
         " ranks share it): spread the model over more ranks (--tp/--pp) or nodes, hold it as "
         "--dtype bf16, or use a device with more memory");
}

// Blocks of the KV pool, the same on every rank: each rank's budget over its own block size, then
// the minimum over ranks (rank 0 hands out block ids for all of them). Never more than every slot
// at full context needs.
long long local_kv_blocks(const RunOptions& o, const LlamaModel& model, int sharers, int context) {
  const uint64_t per_block = KvCache::bytes_per_block(model.n_layers_local(), model.kv_dim_local(), o.kv_block_size,
                                                      kv_cache_dtype(o, model.context().device));
  const uint64_t budget = !o.kv_cache_memory.empty()
                              ? parse_byte_size(o.kv_cache_memory)
                              : static_cast<uint64_t>(0.8 * static_cast<double>(ops::memory_available(model.context())) /
                                                      std::max(1, sharers));
  const long long most = static_cast<long long>(o.max_seqs) * ((context + o.kv_block_size - 1) / o.kv_block_size);
  return std::min<long long>(most, static_cast<long long>(budget / std::max<uint64_t>(per_block, 1)));
}


// What a run holds, built phase by phase. Members are destroyed in reverse order: the model and
// cache before the communicators they use.
struct RunSetup {
  NodeInfo nodes;
  LlamaConfig config;
  std::unique_ptr<Checkpoint> checkpoint;  // null for a synthetic model
  std::unique_ptr<Topology> topology;
  std::unique_ptr<Tokenizer> tokenizer;  // rank 0
  int threads = 1;
  std::unique_ptr<ops::DeviceRuntime> device;
  int device_sharers = 1;  // ranks of this node on this rank's device (its memory is theirs)
  CommBackend comm = CommBackend::kMpi;
  DType dtype = DType::kF32;
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<Communicator> tp_comm;
  std::unique_ptr<Communicator> stage_comm;  // this TP rank through the stages: hidden states
  std::unique_ptr<LlamaModel> model;
  int context = 0;
  int n_blocks = 0;
  std::unique_ptr<KvCache> cache;
  // Rank 0's input and output.
  std::unique_ptr<RequestSource> source;
  std::unique_ptr<ResumeIndex> resume;
  std::unique_ptr<OutputLock> output_lock;
  std::unique_ptr<ResultWriter> writer;
  long long total_requests = 0;
};

// Everything that can be wrong with the layout, the model or the files is found here, on every
// rank, before any weight is copied; the job reports it once.
void validate(const RunOptions& o, const RunHooks* hooks, int world_size, int rank, RunSetup& s) {
  const SyntheticModel* synthetic = hooks != nullptr && hooks->synthetic ? &*hooks->synthetic : nullptr;
  collective_phase([&] {
    if (synthetic != nullptr) {
      s.config = synthetic->config;
      s.config.validate();
    } else {
      s.checkpoint = std::make_unique<Checkpoint>(o.model);
      s.config = s.checkpoint->config();
    }
    const LlamaConfig& c = s.config;
    s.topology = std::make_unique<Topology>(
        make_topology(LayoutRequest{o.tp, o.pp, o.pp_layers}, s.nodes, world_size, rank, c.n_layers));
    if (s.checkpoint && s.checkpoint->presharded()) s.checkpoint->open_rank_shard(*s.topology);
    head_layout(c, s.topology->tp_size(), s.topology->tp_rank());
    if (o.max_model_len > c.max_seq_len)
      fail("--max-model-len ", o.max_model_len, " exceeds the model's context of ", c.max_seq_len,
           " tokens (max_position_embeddings)");
    if (rank != 0) return;
    std::vector<std::pair<std::string, std::string>> outputs;  // fail now, not after hours of work
    if (hooks == nullptr) outputs.emplace_back("--output", o.output);
    outputs.emplace_back("--stats", o.stats);
    outputs.emplace_back("--trace", o.trace);
    if (hooks != nullptr) outputs.insert(outputs.end(), hooks->outputs.begin(), hooks->outputs.end());
    check_output_files({o.input}, outputs);
    if (hooks == nullptr && o.resume && !output_is_a_file(o.output))
      fail("--resume reads and appends to --output, but ", o.output,
           standard_stream_of(o.output) >= 0 ? " is this process's stdout or stderr"
                                             : " is not a regular file (a pipe, a terminal or a device)",
           ": give a file, or drop --resume");
    if (synthetic != nullptr) return;
    if (!std::filesystem::exists(s.checkpoint->tokenizer_path()))
      fail("model directory ", o.model, " has no tokenizer.model (a SentencePiece model is required)");
    s.tokenizer = std::make_unique<Tokenizer>(s.checkpoint->tokenizer_path());
    if (s.tokenizer->vocab_size() > c.vocab_size)
      fail(s.checkpoint->tokenizer_path(), " has ", s.tokenizer->vocab_size(),
           " pieces but config.json says vocab_size ", c.vocab_size);
    if (!std::filesystem::exists(o.input)) fail("prompt file ", o.input, " does not exist");
    if (std::filesystem::is_directory(o.input)) fail("prompt file ", o.input, " is a directory");
    if (std::filesystem::is_regular_file(o.input)) {  // a FIFO is not opened twice: its writer would see a reader leave
      const int fd = ::open(o.input.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail("cannot read prompt file ", o.input, ": ", std::strerror(errno));
      ::close(fd);
    }
    if (hooks != nullptr) return;  // results go to the hooks' sink
  });
  if (rank != 0) return;
  const Topology& t = *s.topology;
  std::string hosts;  // "host (ranks a-b)" per node, from the ranks' own processor names
  for (int r = 0; r < t.world_size();) {
    int last = r;
    while (last + 1 < t.world_size() && s.nodes.node_of_rank[static_cast<size_t>(last + 1)] ==
                                            s.nodes.node_of_rank[static_cast<size_t>(r)])
      ++last;
    hosts += (hosts.empty() ? "" : ", ") + s.nodes.host_of_rank[static_cast<size_t>(r)] + " (ranks " +
             std::to_string(r) + (last > r ? "-" + std::to_string(last) : "") + ")";
    r = last + 1;
  }
  log::info("layout: " + std::to_string(t.world_size()) + " ranks = tp " + std::to_string(t.tp_size()) + " x pp " +
            std::to_string(t.pp_size()) + " on " + std::to_string(s.nodes.n_nodes) + " node(s): " + hosts);
  if (!o.allow_cross_node_tp) warn_cross_node_tp(t, s.nodes);
}

// Ranks of this rank's node whose device has the same identity (every rank of the node on the CPU).
std::vector<int> device_sharers(const RunSetup& s, const std::string& identity) {
  constexpr size_t kWidth = 64;
  std::vector<char> mine(kWidth, '\0'), all(kWidth * static_cast<size_t>(s.topology->world_size()));
  std::copy_n(identity.begin(), std::min(identity.size(), kWidth - 1), mine.begin());
  mpi_check(MPI_Allgather(mine.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> ranks;
  const int me = s.topology->rank();
  for (int r = 0; r < s.topology->world_size(); ++r)
    if (s.nodes.node_of_rank[static_cast<size_t>(r)] == s.nodes.node_of_rank[static_cast<size_t>(me)] &&
        std::string(all.data() + static_cast<size_t>(r) * kWidth) == identity)
      ranks.push_back(r);
  return ranks;
}

// This rank's threads and device: chosen, opened, checked against the node's other ranks, and its
// free memory against the weights it will hold.
void open_device(const RunOptions& o, const RunHooks* hooks, RunSetup& s) {
  const ops::cpu::ThreadPlacement placement =
      ops::cpu::plan_threads(o.threads, s.nodes.local_rank, s.nodes.ranks_on_node);
  ops::cpu::apply_threads(placement);
  s.threads = placement.threads;
  if (placement.oversubscribed)
    log::warn("rank " + std::to_string(s.topology->rank()) + ": " + placement.note);
  else if (!placement.note.empty() && s.topology->rank() == 0)
    log::info(placement.note);
  Device device = Device::kCpu;
  int gpu = -1, gpus = 0;
  std::string identity = "cpu";
  collective_phase([&] {
    gpus = ops::gpu_count();
    if (o.device == "cuda" && gpus == 0)
      fail("--device cuda, but rank ", s.topology->rank(), " on ",
           s.nodes.host_of_rank[static_cast<size_t>(s.topology->rank())], " sees no GPU (",
           ops::cuda_built() ? "check CUDA_VISIBLE_DEVICES and the job's GPU allocation"
                             : "this build has no CUDA: configure with -DTPLLAMA_CUDA=ON where nvcc is installed",
           "), or run with --device cpu");
    if (o.device == "cuda" || (o.device == "auto" && gpus > 0)) device = Device::kCuda;
    if (device == Device::kCpu && o.comm == "nccl") fail("--comm nccl needs GPUs; this run is on the CPU");
    if (device == Device::kCuda) {
      gpu = s.nodes.local_rank % gpus;
      identity = ops::gpu_uuid(gpu);
    }
  });
  const std::vector<int> sharers = device_sharers(s, identity);
  s.device_sharers = static_cast<int>(sharers.size());
  collective_phase([&] {
    if (device == Device::kCuda && sharers.size() > 1) {
      std::string list;
      for (int r : sharers) list += (list.empty() ? "" : ", ") + std::to_string(r);
      if (!o.share_gpus)
        fail("ranks ", list, " on ", s.nodes.host_of_rank[static_cast<size_t>(s.topology->rank())], " would share GPU ",
             gpu, " (", s.nodes.ranks_on_node, " ranks on the node, ", gpus,
             " GPUs visible): start one rank per GPU, or pass --share-gpus --comm mpi to let them share");
      if (o.comm == "nccl") fail("ranks ", list, " share one GPU, which NCCL cannot do: use --comm mpi");
    }
    s.comm = o.comm == "auto" ? (device == Device::kCuda && !o.share_gpus ? CommBackend::kNccl : CommBackend::kMpi)
                              : parse_comm_backend(o.comm);
    s.dtype = weight_dtype(o, device);
    s.device = std::make_unique<ops::DeviceRuntime>(device, gpu, s.threads);
  });
  if (hooks != nullptr && hooks->on_device) {
    hooks->on_device(s.device->context(), sharers.front() == s.topology->rank());
    ops::cpu::apply_threads(placement);  // the hook may have spread this rank over the node to measure it
  }
  collective_phase([&] { check_weights_fit(s.config, *s.topology, s.device->context(), s.dtype, s.device_sharers); });
  if (s.topology->rank() == 0)
    log::info("device: rank 0 on " + s.device->describe() + "; TP and stage tensors over " +
              (s.comm == CommBackend::kNccl ? "NCCL" : device == Device::kCpu ? "MPI" : "MPI, staged through host memory") +
              (s.device_sharers > 1 && device == Device::kCuda ? "; " + std::to_string(s.device_sharers) + " ranks share its GPU" : ""));
}

// Communicators, then this rank's shard of the weights.
void load_model(const RunOptions& o, const RunHooks* hooks, RunSetup& s) {
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Comm world_dup;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world_dup), "MPI_Comm_dup");
  s.world = std::make_unique<MpiCommunicator>(world_dup);
  const DeviceContext& ctx = s.device->context();
  s.tp_comm = make_group_communicator(MpiCommunicator::split(MPI_COMM_WORLD, s.topology->pp_rank(), s.topology->tp_rank()),
                                      s.comm, ctx, "TP group");
  s.stage_comm = make_group_communicator(
      MpiCommunicator::split(MPI_COMM_WORLD, s.topology->tp_rank(), s.topology->pp_rank()), s.comm, ctx, "stage group");
  collective_phase([&] {
    const ModelLimits limits{o.max_batch_tokens, max_logit_rows(o)};
    ModelWeights weights = hooks != nullptr && hooks->synthetic
                               ? random_weights(s.config, *s.topology, ctx, s.dtype, hooks->synthetic->seed)
                               : load_weights(*s.checkpoint, *s.topology, ctx, s.dtype);
    s.model = std::make_unique<LlamaModel>(s.config, std::move(weights), *s.topology, *s.tp_comm, ctx, limits);
    s.model->use_graphs(!o.eager);
  });
  report_weights(*s.topology, s.model->weights(), s.checkpoint.get(), s.config);
  const LlamaConfig& config = s.config;
  s.context = o.max_model_len > 0 ? std::min(o.max_model_len, config.max_seq_len) : config.max_seq_len;
  if (hooks != nullptr && hooks->context_len > 0) s.context = std::min(s.context, hooks->context_len);
  if (s.topology->rank() != 0) return;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "model " << (s.checkpoint ? o.model : "(random weights)") << ": " << config.n_layers << " layers, dim " << config.dim << ", " << config.n_heads
     << " heads (" << config.n_kv_heads << " kv), vocab " << config.vocab_size << ", context " << config.max_seq_len
     << "; loaded in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s; "
     << s.threads << " threads per rank; weights " << dtype_name(s.dtype);
  if (ctx.device == Device::kCpu) os << ", GEMM kernel " << ops::cpu::gemm_kernel_name();
  if (ops::graphs_supported(ctx))
    os << "; decode steps " << (s.model->graphs_on() && s.tp_comm->graph_capturable() ? "as CUDA graphs" : "launched eagerly");
  log::info(os.str());
}

// The KV pool: the same block count on every rank, refused if one full-context sequence won't fit.
void make_kv_cache(const RunOptions& o, const RunHooks* hooks, RunSetup& s) {
  long long blocks = 0;
  collective_phase([&] { blocks = local_kv_blocks(o, *s.model, s.device_sharers, s.context); });
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &blocks, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  s.n_blocks = static_cast<int>(std::min<long long>(blocks, INT32_MAX));
  collective_phase([&] {
    const int full = (s.context + o.kv_block_size - 1) / o.kv_block_size;
    if (s.n_blocks < full)
      fail("the KV cache holds ", s.n_blocks, " blocks of ", o.kv_block_size,
           " tokens on the smallest rank, less than one ", s.context, "-token sequence needs (", full,
           "): give more --kv-cache-memory or a smaller ", hooks != nullptr ? hooks->context_flag : "--max-model-len");
    s.cache = std::make_unique<KvCache>(s.model->n_layers_local(), s.model->kv_dim_local(), o.kv_block_size,
                                        s.n_blocks, o.max_seqs, s.model->context(), full,
                                        kv_cache_dtype(o, s.model->context().device));
  });
  if (s.topology->rank() != 0) return;
  std::ostringstream os;
  os << "KV cache (" << dtype_name(s.cache->dtype()) << "): " << s.n_blocks << " blocks of " << o.kv_block_size << " tokens = "
     << static_cast<long long>(s.n_blocks) * o.kv_block_size << " tokens (" << mib(s.cache->bytes())
     << " on rank 0), room for " << static_cast<long long>(KvCache::sequences_held(s.n_blocks, o.kv_block_size, s.context))
     << " sequences at the full context of " << s.context << " tokens";
  log::info(os.str());
  if (o.kv_block_size > s.context)
    log::warn("--kv-block-size " + std::to_string(o.kv_block_size) + " is larger than the context of " +
              std::to_string(s.context) + " tokens: every sequence takes a whole block, most of it unused");
}

// Rank 0's requests and results. The output is opened (and truncated, without --resume) only once
// everything else is known to work, and locked before anything reads or cuts it.
void open_io(const RunOptions& o, const RunHooks* hooks, RunSetup& s) {
  collective_phase([&] {
    if (s.topology->rank() != 0) return;
    if (hooks != nullptr) {
      s.source = hooks->make_source(s.tokenizer.get(), s.config, s.context);
      return;
    }
    auto reader = std::make_unique<PromptReader>(o.input, o.defaults, parse_input_format(o.input_format));
    const OutputFormat format =
        reader->format() == InputFormat::kOpenAiBatch ? OutputFormat::kOpenAiBatch : OutputFormat::kJsonl;
    s.source = std::move(reader);
    // A pipe, a terminal or /dev/stdout is written as it comes: nothing to lock, cut or resume.
    const bool file = output_is_a_file(o.output);
    const bool had_output = file && std::filesystem::exists(o.output) && std::filesystem::file_size(o.output) > 0;
    if (file) s.output_lock = std::make_unique<OutputLock>(o.output);
    if (o.resume) {
      s.resume = std::make_unique<ResumeIndex>(prepare_resume(o.output, format));
      log::info("resume: " + std::to_string(s.resume->records) + " records already in " + o.output +
                (s.resume->truncated_bytes > 0
                     ? "; cut a torn last line of " + std::to_string(s.resume->truncated_bytes) + " bytes"
                     : ""));
    } else if (had_output) {
      log::warn("overwriting " + o.output + " (" + std::to_string(std::filesystem::file_size(o.output)) +
                " bytes); pass --resume to keep its records and continue after them");
    }
    s.writer = std::make_unique<ResultWriter>(o.output, format, /*append=*/o.resume || !file, model_name(o.model));
    if (std::optional<size_t> lines = count_prompt_lines(o.input)) s.total_requests = static_cast<long long>(*lines);
  });
}

RunSummary run_on_rank0(const RunOptions& o, const RunHooks* hooks, RunSetup& s, Pipeline& pipeline, TraceRecorder* trace) {
  EngineOptions options{o.max_seqs,           o.max_batch_tokens, o.log_interval,  tokenizer_adds_bos(o.model),
                        s.topology->pp_size(), s.context,         o.kv_block_size, s.n_blocks,
                        max_logit_rows(o)};
  options.grace_seconds = o.grace_seconds;
  options.resumable = resumable(hooks);
  if (hooks != nullptr) options.restart_hint = hooks->restart_hint;
  Engine engine(s.config, s.tokenizer.get(), pipeline, options);
  EngineIo io;
  io.reader = s.source.get();
  io.writer = hooks != nullptr ? hooks->sink : s.writer.get();
  io.resume = s.resume.get();
  io.ordered = o.ordered;
  io.reorder_limit = static_cast<size_t>(std::max(1024, 4 * o.max_seqs));
  io.total_requests = hooks != nullptr && hooks->total_requests > 0 ? hooks->total_requests : s.total_requests;
  io.terminal = ::isatty(STDERR_FILENO) != 0;
  io.trace = trace;
  return engine.run(io);
}

// The last lines of a run on rank 0; returns the exit status.
int finish_on_rank0(const RunOptions& o, const RunHooks* hooks, const RunSetup& s, const RunSummary& summary) {
  if (summary.stopped_by != 0) {
    log::warn("stopped early: " + summary.describe() + "; exit status " + std::to_string(kExitStoppedEarly) +
              (resumable(hooks) ? ": run again with --resume to continue" : ": " + hooks->restart_hint));
    return kExitStoppedEarly;
  }
  log::info("done: " + summary.describe() + (hooks != nullptr ? "" : "; output " + o.output));
  if (hooks == nullptr && summary.requests == 0 && summary.skipped == 0)
    log::warn(o.input + " holds no request (it is empty or every line is blank): is it the right file?");
  if (summary.unmatched_records > 0)
    log::warn(std::to_string(summary.unmatched_records) + " records already in " + o.output + " match no request of " +
              o.input + ": is --output from another job? (they are kept)");
  const long long finished = summary.finished_stop + summary.finished_length;
  if (summary.errors > 0 && finished == 0 && summary.scored == 0 && summary.skipped == 0) {
    // The records are written, but a job whose every request failed (a wrong format, prompts all
    // too long) should not look like a success to Slurm. Not after --resume skipped records: the
    // earlier part of the job may have answered requests.
    log::error("every request of this run failed (" + std::to_string(summary.errors) +
               " error records); exit status " + std::to_string(kExitAllRequestsFailed));
    return kExitAllRequestsFailed;
  }
  if (finished == 0) return 0;
  const double avg = static_cast<double>(summary.prompt_tokens + summary.generated_tokens) / static_cast<double>(finished);
  const double capacity = static_cast<double>(s.n_blocks) * o.kv_block_size;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(0);
  os << "KV capacity " << capacity << " tokens = about " << std::floor(KvCache::sequences_held(s.n_blocks, o.kv_block_size, avg))
     << " concurrent sequences at this run's average request length of " << avg << " tokens (--max-seqs "
     << o.max_seqs << ")";
  log::info(os.str());
  return 0;
}

}  // namespace

int run_command(const RunOptions& o, const MpiSession& mpi) { return run_engine(o, mpi, nullptr); }

int run_engine(const RunOptions& o, const MpiSession& mpi, const RunHooks* hooks) {
  const StopDeadline deadline(o.grace_seconds);  // a stop that a stalled rank holds up ends the job
  RunSetup s;
  s.nodes = detect_nodes();
  validate(o, hooks, mpi.world_size(), mpi.rank(), s);
  open_device(o, hooks, s);
  load_model(o, hooks, s);
  make_kv_cache(o, hooks, s);
  open_io(o, hooks, s);

  TraceRecorder trace(!o.trace.empty());
  s.tp_comm->set_trace(&trace);
  s.stage_comm->set_trace(&trace);
  s.world->set_trace(&trace);
  mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");  // a common time origin for the trace
  trace.set_origin(TraceRecorder::Clock::now());
  Pipeline pipeline(*s.model, *s.cache, *s.topology, *s.tp_comm, *s.stage_comm, *s.world, &trace);
  RunSummary summary;
  {
    const Topology& t = *s.topology;
    StallWatch stall(o.stall_timeout,
                     "rank " + std::to_string(t.rank()) + " (stage " + std::to_string(t.pp_rank()) + ", tp rank " +
                         std::to_string(t.tp_rank()) + ") on " + s.nodes.host_of_rank[static_cast<size_t>(t.rank())],
                     resumable(hooks) ? "--resume continues from what was written"
                                                          : hooks->restart_hint);
    pipeline.set_stall_watch(&stall);
    if (mpi.rank() == 0)
      summary = run_on_rank0(o, hooks, s, pipeline, &trace);
    else
      pipeline.serve();
    pipeline.set_stall_watch(nullptr);
  }
  const std::vector<RankFigures> figures =
      report_run(*s.topology, s.nodes.n_nodes,
                 collect_rank_figures(s.model->weights(), *s.cache, pipeline.stats(), {s.tp_comm.get(), s.stage_comm.get(), s.world.get()}),
                 mpi.rank() == 0 ? &summary : nullptr, o.stats);
  if (!o.trace.empty()) write_trace(*s.topology, trace, o.trace);
  if (mpi.rank() == 0 && hooks != nullptr && hooks->on_finish)
    hooks->on_finish(RunOutcome{summary, figures, s.config, *s.topology, s.threads, s.nodes.n_nodes,
                                s.device->describe(), s.dtype, s.cache->dtype()});
  return mpi.rank() == 0 ? finish_on_rank0(o, hooks, s, summary) : 0;
}

}  // namespace tpllama
