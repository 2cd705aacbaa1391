// `tpllama run`: load this rank's shard, stream the prompt file through the engine, write results.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <filesystem>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "model/checkpoint.h"
#include "model/llama_model.h"
#include "ops/cpu/cpu_ops.h"
#include "parallel/mpi_comm.h"
#include "runtime/engine.h"
#include "runtime/tokenizer.h"

namespace tpllama {

void add_run_command(CLI::App& app, RunOptions& o) {
  CLI::App* run = app.add_subcommand("run", "Generate completions for every prompt of a file");
  run->add_option("--model", o.model, "Hugging Face LLaMA model directory (config.json, *.safetensors, tokenizer.model)")
      ->required();
  run->add_option("--input", o.input, "Prompt file: .txt (one prompt per line) or .jsonl (objects with 'prompt')")
      ->required();
  run->add_option("--output", o.output, "Output JSONL file, one record per request, appended as requests finish")
      ->required();
  run->add_option("--max-tokens", o.defaults.max_tokens, "Tokens to generate per request (requests may override)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--temperature", o.defaults.sampling.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--top-k", o.defaults.sampling.top_k, "Keep the k most probable tokens; 0 = off")->capture_default_str();
  run->add_option("--top-p", o.defaults.sampling.top_p, "Nucleus sampling: smallest set reaching p; 1 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--min-p", o.defaults.sampling.min_p, "Drop tokens below min_p times the top probability; 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--seed", o.defaults.seed, "Base seed; each request's stream derives from it and its line number")
      ->capture_default_str();
  run->add_option("--max-seqs", o.max_seqs, "Sequences in flight at once")->capture_default_str()->check(CLI::PositiveNumber);
  run->add_option("--max-batch-tokens", o.max_batch_tokens, "Tokens per forward step (long prompts are chunked)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--threads", o.threads, "CPU threads per rank; default: cores of the node / ranks on the node");
  run->add_option("--log-interval", o.log_interval, "Seconds between progress lines")->capture_default_str();
}

namespace {

int default_threads(const Topology& topology) {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, topology.ranks_on_node()));
}

std::string gib(uint64_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(bytes < (1ull << 30) ? 2 : 1);
  if (bytes < (1ull << 30))
    os << static_cast<double>(bytes) / (1 << 20) << " MiB";
  else
    os << static_cast<double>(bytes) / (1ull << 30) << " GiB";
  return os.str();
}

// Hugging Face tokenizer_config.json may turn BOS off ("add_bos_token": false); LLaMA default is on.
bool tokenizer_adds_bos(const std::string& model_dir) {
  std::ifstream in(model_dir + "/tokenizer_config.json");
  if (!in) return true;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("add_bos_token") || !j["add_bos_token"].is_boolean())
    return true;
  return j["add_bos_token"].get<bool>();
}

}  // namespace

int run_command(const RunOptions& o, const MpiSession& mpi) {
  const auto t0 = std::chrono::steady_clock::now();
  // Everything that can be wrong with the model is found here, before any weight is copied.
  Checkpoint checkpoint(o.model);
  const LlamaConfig& config = checkpoint.config();
  if (mpi.world_size() != 1)
    fail("tpllama run was started on ", mpi.world_size(),
         " ranks, but this version runs a model on one rank only (tensor and pipeline parallel "
         "layouts are not available yet); start it with mpirun -np 1");
  Topology topology(mpi.world_size(), mpi.rank(), 1, 1, config.n_layers);
  detect_nodes(&topology);
  if (!std::filesystem::exists(checkpoint.tokenizer_path()))
    fail("model directory ", o.model, " has no tokenizer.model (a SentencePiece model is required)");
  Tokenizer tokenizer(checkpoint.tokenizer_path());
  if (tokenizer.vocab_size() > config.vocab_size)
    fail(checkpoint.tokenizer_path(), " has ", tokenizer.vocab_size(), " pieces but config.json says vocab_size ",
         config.vocab_size);
  if (!std::filesystem::exists(o.input)) fail("prompt file ", o.input, " does not exist");
  if (std::filesystem::exists(o.output) && std::filesystem::equivalent(o.input, o.output))
    fail("--output ", o.output, " is the prompt file itself; refusing to overwrite the input");
  PromptReader reader(o.input, o.defaults);
  ResultWriter writer(o.output);

  const int threads = o.threads > 0 ? o.threads : default_threads(topology);
  ops::cpu::set_threads(threads);
  auto tp_comm = MpiCommunicator::split(MPI_COMM_WORLD, topology.pp_rank(), topology.tp_rank());
  DeviceContext ctx{Device::kCpu, threads};
  LlamaModel model(checkpoint, topology, *tp_comm, ctx, ModelLimits{o.max_batch_tokens, o.max_seqs});
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "model " << o.model << ": " << config.n_layers << " layers, dim " << config.dim << ", " << config.n_heads
     << " heads (" << config.n_kv_heads << " kv), vocab " << config.vocab_size << ", context " << config.max_seq_len
     << "; weights held " << gib(model.weights().bytes_held) << " (read " << gib(model.weights().bytes_read)
     << ") in " << load_s << " s; " << threads << " threads";
  log::info(os.str());

  Engine engine(model, tokenizer,
                EngineOptions{o.max_seqs, o.max_batch_tokens, o.log_interval, tokenizer_adds_bos(o.model)});
  RunSummary summary = engine.run(reader, writer);
  log::info("done: " + summary.describe() + "; output " + o.output);
  return 0;
}

}  // namespace tpllama
