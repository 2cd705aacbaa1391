// The subcommands: CLI11 definitions fill plain option structs; each command is a function of its
// options, the MPI session and nothing else. run, bench and perplexity each compose a Session
// (session/session.h) with their own request source, result sink and report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/request.h"
#include "session/session.h"

namespace tpllama {

class MpiSession;

// run's flags, and those perplexity and bench share with it. The session's (model, layout, device,
// memory, engine) are parsed straight into their typed fields.
struct RunOptions {
  SessionOptions session;
  std::string input;
  std::string output;
  RequestDefaults defaults;
  std::string response_format;  // --response-format FILE: every request's default constraint
  std::string input_format = "auto";
  bool resume = false;
  bool overwrite = false;  // replace the records an earlier run left in --output
  bool ordered = false;
  DpRouting dp_routing = DpRouting::kPrefix;  // --dp-routing
  double stall_timeout = 900;     // seconds without a pipeline step before the job ends; 0: never
  std::string stats;              // --stats JSON path
  std::string trace;              // --trace Chrome trace path
  std::string served_model_name;  // the records' "model"; "": the model directory's name
};

struct ConvertOptionsCli {
  std::string from = "llama2c";
  std::string checkpoint;
  std::string model;  // --from hf
  std::string tokenizer;
  std::string out;
  std::string dtype = "f32";
  std::string shape = "tiny";
  std::string config;  // a config.json for --from random, instead of --shape
  uint64_t seed = 0;
  int vocab = 0;  // 0: the tokenizer's vocabulary size
};

struct ShardOptionsCli {
  std::string model;
  std::string out;
  int tp = 1;
  int pp = 1;
  std::vector<int> pp_layers;
  std::string dtype = "keep";  // or int8
};

struct PerplexityOptions {
  RunOptions run;
  std::string json;     // --output
  int context_len = 0;  // 0: the model's context
  int stride = 0;       // 0: half the window
  std::string windows;  // --windows: each window's score, for --resume
  bool resume = false;
  bool overwrite = false;  // replace what an earlier run left in --windows and --output
};

struct BenchOptions {
  RunOptions run;
  std::string shape;  // with random_weights: a named shape instead of --model
  bool random_weights = false;
  uint64_t seed = 0;
  int vocab = 0;  // overrides the shape's vocabulary
  int prompts = 16;
  int shared_prefix = 0;  // tokens every prompt starts with (0: none)
  int continuations = 0;  // > 0: each prompt is a context scored with this many continuations
  std::string input_len = "128";  // N or A:B
  std::string output_len = "128";
  std::string json;
  bool skip_limits = false;
  bool op_split = false;        // --op-split: rank 0's forward timed op by op
  std::optional<int> max_seqs;  // --max-seqs; default: as many as --prompts (at most 256)
};

struct TokenizeOptions {
  std::string model, input, output, chat_template, input_format = "auto";
  bool overwrite = false;  // replace the records an earlier run left in --output
};

struct PlanOptions {
  std::string model, shape, hostfile, gpu = "h100-80g", memory, intra = "nvlink",
                                      inter = "infiniband", dtype = "bf16", json;
  int nodes = 1, per_node = 8, max_seqs = 256, tp = 0, pp = 0, dp = 0, vocab = 0;
  int input_len = 0, output_len = 0;  // 0: 512 and 256, within the model's context
  double bandwidth = 0, flops = 0;
};

void add_run_command(CLI::App& app, RunOptions& options);
void add_bench_command(CLI::App& app, BenchOptions& options);
// --threads, --tp, --pp, --pp-layers, --allow-cross-node-tp, --stall-timeout, --kv-cache-memory,
// --dtype, --kv-dtype, --device, --comm, --eager, --prefix-caching and --share-gpus: how a run is
// laid out over ranks, devices and memory, and watched (run, perplexity and bench).
void add_layout_options(CLI::App& command, RunOptions& options);
// --log-interval: seconds between progress lines when stderr is not a terminal (run, perplexity,
// bench).
void add_log_interval_option(CLI::App& command, RunOptions& options);
// --chat-template FILE (run and tokenize).
void add_chat_template_option(CLI::App& command, std::string& path);
// The serving settings of a run's options.
ServeOptions serve_options(const RunOptions& options, Continuation continuation);
// The model directory's own name ("llama-7b" for "/models/llama-7b/"): OpenAI records' "model".
std::string model_name(const std::string& model_dir);
// --served-model-name, else model_name of --model.
std::string served_model_name(const RunOptions& o);
void add_plan_command(CLI::App& app, PlanOptions& options);
void add_perplexity_command(CLI::App& app, PerplexityOptions& options);
void add_convert_command(CLI::App& app, ConvertOptionsCli& options);
void add_shard_command(CLI::App& app, ShardOptionsCli& options);
void add_tokenize_command(CLI::App& app, TokenizeOptions& options);

int run_command(const RunOptions& options, const MpiSession& mpi);
int convert_command(const ConvertOptionsCli& options, const MpiSession& mpi);
int shard_command(const ShardOptionsCli& options, const MpiSession& mpi);
int perplexity_command(PerplexityOptions options, const MpiSession& mpi);
int plan_command(const PlanOptions& options, const MpiSession& mpi);
int bench_command(BenchOptions options, const MpiSession& mpi);
int tokenize_command(const TokenizeOptions& options, const MpiSession& mpi);

}  // namespace tpllama
