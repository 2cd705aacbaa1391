// The subcommands: CLI11 definitions fill plain option structs; each command is a function of its
// options, the MPI session's world and nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/prompt_reader.h"
#include "io/request.h"
#include "io/result_writer.h"
#include "app/run_report.h"
#include "core/dtype.h"
#include "model/config.h"
#include "runtime/engine.h"
#include "runtime/tokenizer.h"

namespace tpllama {

class MpiSession;

struct RunOptions {
  std::string model;
  std::string input;
  std::string output;
  RequestDefaults defaults;
  int max_seqs = 64;
  int max_batch_tokens = 2048;
  int threads = 0;  // 0: cores of this node / ranks on this node
  double log_interval = 30.0;
  int tp = 0;  // 0: derived (ranks per node, or world / pp)
  int pp = 0;  // 0: derived (number of nodes, or world / tp)
  std::vector<int> pp_layers;
  bool allow_cross_node_tp = false;
  int kv_block_size = 16;
  std::string kv_cache_memory;  // bytes per rank, e.g. "8GiB"; empty: a share of free memory
  int max_model_len = 0;        // 0: max_position_embeddings
  std::string input_format = "auto";
  bool resume = false;
  bool ordered = false;
  double grace_seconds = 90;
  double stall_timeout = 900;  // seconds without a pipeline step before the job ends; 0: never
  std::string stats;            // --stats JSON path
  std::string trace;            // --trace Chrome trace path
  std::string dtype = "auto";   // how weight matrices are held: f32, bf16, or auto (bf16 on a GPU)
  std::string device = "auto";  // cpu, cuda, or auto (cuda when built in and a GPU is visible)
  std::string comm = "auto";    // mpi, nccl, or auto (nccl on GPUs unless they are shared)
  bool share_gpus = false;      // let several ranks use one GPU (with --comm mpi)
  bool eager = false;           // no CUDA graphs: every step launches its kernels
  std::string kv_dtype = "auto";  // KV cache: f32, bf16, or auto (bf16 on a GPU with bf16 weights, else f32)
};

// "8GiB", "512MiB", "1.5GB", "4096" → bytes; throws naming the text.
uint64_t parse_byte_size(const std::string& text);

struct ConvertOptionsCli {
  std::string from = "llama2c";
  std::string checkpoint;
  std::string tokenizer;
  std::string out;
  std::string dtype = "f32";
  std::string shape = "tiny";
  uint64_t seed = 0;
  int vocab = 0;  // 0: the tokenizer's vocabulary size
};

struct ShardOptionsCli {
  std::string model;
  std::string out;
  int tp = 1;
  int pp = 1;
  std::vector<int> pp_layers;
};

// A model without files: a named shape with seeded random weights (benchmarks).
struct SyntheticModel {
  LlamaConfig config;
  uint64_t seed = 0;
};

// What rank 0 knows at the end of a run, for the command that started it.
struct RunOutcome {
  const RunSummary& summary;
  const std::vector<RankFigures>& ranks;  // every rank's figures, by world rank
  const LlamaConfig& config;
  const Topology& topology;
  int threads = 1;
  int n_nodes = 1;
  std::string device;  // rank 0's device, described
  DType dtype = DType::kF32;  // how the weight matrices are held
  DType kv_dtype = DType::kF32;
};

// What another command (perplexity, bench) puts in place of the prompt file, the output file and
// (bench) the model directory. The tokenizer given to make_source is null for a synthetic model.
struct RunHooks {
  std::function<std::unique_ptr<RequestSource>(const Tokenizer*, const LlamaConfig&, int context)> make_source;
  ResultSink* sink = nullptr;
  std::optional<SyntheticModel> synthetic;
  std::function<void(const RunOutcome&)> on_finish;  // rank 0, after the run's own report
  // Every rank, once its device is chosen and before weights load (bench measures its limits).
  // `first_on_device`: this rank is the lowest of the ranks on its device (its node's CPUs, or its
  // GPU), so one rank per device may measure it.
  std::function<void(const DeviceContext&, bool first_on_device)> on_device;
  // Requests the source will give, for the progress line's share done and ETA (0: unknown). Read
  // after make_source, which may set it.
  long long total_requests = 0;
  // Files the command writes besides the run's own, as (flag, path): checked with --stats and
  // --trace before the run (writable, not the input, not another output).
  std::vector<std::pair<std::string, std::string>> outputs;
  // The context the command's requests need (perplexity's window), when below the model's: the KV
  // cache is sized for it, and a cache too small names `context_flag`.
  int context_len = 0;
  std::string context_flag = "--max-model-len";
  // Whether a stopped run continues with --resume (perplexity without --windows starts over).
  bool resumable = true;
  // What a stopped run that is not resumable should do next.
  std::string restart_hint = "this command has no --resume; run it again to start over";
};

struct PerplexityOptions {
  RunOptions run;
  std::string json;     // --output
  int context_len = 0;  // 0: the model's context
  int stride = 0;       // 0: half the window
  std::string windows;  // --windows: each window's score, for --resume
  bool resume = false;
};

struct BenchOptions {
  RunOptions run;
  std::string shape;  // with random_weights: a named shape instead of --model
  bool random_weights = false;
  uint64_t seed = 0;
  int vocab = 0;  // overrides the shape's vocabulary
  int prompts = 16;
  std::string input_len = "128";   // N or A:B
  std::string output_len = "128";
  std::string json;
  bool skip_limits = false;
  BenchOptions() { run.max_seqs = 0; }  // 0: as many as --prompts (at most 256)
};

struct PlanOptions {
  std::string model, shape, hostfile, gpu = "h100-80g", memory, intra = "nvlink", inter = "infiniband", dtype = "bf16", json;
  int nodes = 1, per_node = 8, max_seqs = 256, tp = 0, pp = 0, vocab = 0;
  int input_len = 0, output_len = 0;  // 0: 512 and 256, within the model's context
  double bandwidth = 0, flops = 0;
};

void add_run_command(CLI::App& app, RunOptions& options);
void add_bench_command(CLI::App& app, BenchOptions& options);
// --threads, --tp, --pp, --pp-layers, --allow-cross-node-tp, --stall-timeout, --kv-cache-memory,
// --dtype, --kv-dtype, --device, --comm, --eager and --share-gpus: how a run is laid out over
// ranks, devices and memory, and watched (run, perplexity and bench).
void add_layout_options(CLI::App& command, RunOptions& options);
// --log-interval: seconds between progress lines when stderr is not a terminal (run, perplexity,
// bench).
void add_log_interval_option(CLI::App& command, RunOptions& options);
// The --dtype weights are held in on a device (auto: bf16 on a GPU, f32 on the CPU).
DType weight_dtype(const RunOptions& options, Device device);
// The --kv-dtype of the KV cache (auto: bf16 on a GPU with bf16 weights, else f32).
DType kv_cache_dtype(const RunOptions& options, Device device);
// The model directory's own name ("llama-7b" for "/models/llama-7b/"): OpenAI records' "model".
std::string model_name(const std::string& model_dir);
void add_plan_command(CLI::App& app, PlanOptions& options);
void add_perplexity_command(CLI::App& app, PerplexityOptions& options);
void add_convert_command(CLI::App& app, ConvertOptionsCli& options);
void add_shard_command(CLI::App& app, ShardOptionsCli& options);

int run_command(const RunOptions& options, const MpiSession& mpi);
// The whole run with the request source and result sink of hooks (nullptr: the files of options).
int run_engine(const RunOptions& options, const MpiSession& mpi, const RunHooks* hooks);
int convert_command(const ConvertOptionsCli& options, const MpiSession& mpi);
int shard_command(const ShardOptionsCli& options, const MpiSession& mpi);
int perplexity_command(PerplexityOptions options, const MpiSession& mpi);
int plan_command(const PlanOptions& options, const MpiSession& mpi);
int bench_command(BenchOptions options, const MpiSession& mpi);

}  // namespace tpllama
