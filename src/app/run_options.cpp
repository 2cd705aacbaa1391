// The command-line options of `tpllama run` and those it shares with perplexity and bench, and
// what they resolve to (dtypes, sizes, the model's name).
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "core/error.h"
#include "session/session.h"

namespace tpllama {

void add_run_command(CLI::App& app, RunOptions& o) {
  CLI::App* run = app.add_subcommand("run", "Generate completions for every prompt of a file");
  run->add_option("--model", o.session.model,
                  "Hugging Face LLaMA model directory (config.json, *.safetensors, tokenizer.model "
                  "or tokenizer.json)")
      ->required();
  run->add_option(
         "--input", o.input,
         "Prompt file: .txt (one prompt per line), .jsonl (objects with 'prompt', 'messages' "
         "(chat), or 'context' and 'continuation' to score), or an OpenAI batch file "
         "(/v1/completions and "
         "/v1/chat/completions lines)")
      ->required();
  run->add_option("--output", o.output,
                  "Output JSONL file, one record per request, appended as requests finish")
      ->required();
  run->add_option("--max-tokens", o.defaults.max_tokens,
                  "Tokens to generate per request (requests may override)")
      ->capture_default_str()
      ->check(at_least(1));
  run->add_option("--temperature", o.defaults.sampling.temperature,
                  "Sampling temperature; 0 = greedy")
      ->capture_default_str()
      ->check(finite_in(0, 1e6));
  run->add_option("--top-k", o.defaults.sampling.top_k,
                  "Keep the k most probable tokens; 0 or -1 (vLLM's) = off")
      ->capture_default_str()
      ->check(at_least(-1));
  run->add_option("--top-p", o.defaults.sampling.top_p,
                  "Nucleus sampling: smallest set reaching p; 1 = off")
      ->capture_default_str()
      ->check(finite_in(1e-12, 1));
  run->add_option("--min-p", o.defaults.sampling.min_p,
                  "Drop tokens below min_p times the top probability; 0 = off")
      ->capture_default_str()
      ->check(finite_in(0, 1));
  run->add_option("--seed", o.defaults.seed,
                  "Base seed; each request's stream derives from it and its line number")
      ->capture_default_str()
      ->check(unsigned_64());
  run->add_option("--n", o.defaults.n,
                  "Samples per request (requests may override with n), sharing its prompt's KV "
                  "cache: one record with n choices; at most --max-seqs")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxSamples));
  run->add_option("--response-format", o.response_format,
                  "Structured outputs for every completion and chat that sets none: a JSON file "
                  "holding an OpenAI response_format ({\"type\": \"json_schema\", \"json_schema\": "
                  "{\"schema\": ...}} or {\"type\": \"json_object\"}) or a vLLM structured_outputs "
                  "object ({\"json\"|\"regex\"|\"choice\"|\"grammar\": ...})");
  run->add_option("--json-max-digits", o.defaults.json_max_digits,
                  "Structured outputs: the most digits of a JSON number's integer part where its "
                  "schema leaves it unbounded, and of its fraction (numbers are written without an "
                  "exponent; a small model left alone writes digits without end)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  run->add_option("--max-seqs", o.session.engine.max_seqs, "Sequences in flight at once")
      ->capture_default_str()
      ->check(at_least(1));
  run->add_option("--max-batch-tokens", o.session.engine.max_batch_tokens,
                  "Tokens per forward step (long prompts are chunked)")
      ->capture_default_str()
      ->check(at_least(1));
  add_log_interval_option(*run, o);
  run->add_option("--kv-block-size", o.session.engine.kv_block_size,
                  "Positions per KV cache block (default: 64 on a CPU, 16 on a GPU, at most the "
                  "context)")
      ->check(CLI::Range(1, 4096));
  run->add_option("--input-format", o.input_format,
                  "auto (from the content and extension), text, jsonl or openai")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "text", "jsonl", "openai"}));
  CLI::Option* resume = run->add_flag("--resume", o.resume,
                                      "Keep the records already in --output (a torn last line is "
                                      "cut), skip their ids, append the rest");
  run->add_flag("--overwrite", o.overwrite,
                "Replace the records an earlier run left in --output (without it, or --resume, a "
                "non-empty "
                "--output is refused)")
      ->excludes(resume);
  run->add_flag("--ordered", o.ordered,
                "Write records in input order (default: as requests finish)");
  run->add_option("--grace-seconds", o.session.engine.grace_seconds,
                  "After SIGTERM/SIGUSR1/SIGINT: seconds in-flight requests may still finish "
                  "before the run stops "
                  "(exit status 75; --resume continues). A second signal, 1 s or more after the "
                  "first, stops at "
                  "once. Under mpirun send mpirun SIGUSR1: on SIGTERM or Ctrl-C Open MPI ends the "
                  "ranks (SIGKILL 1 s "
                  "after its SIGTERM) and exits 1. Under Slurm: scancel --batch --signal=USR1 JOB "
                  "(plain scancel stops gracefully only under srun, within KillWait)")
      ->capture_default_str()
      ->check(finite_in(0, 1e9));
  run->add_option("--stats", o.stats, "Write run statistics as JSON to this file at the end");
  run->add_option("--trace", o.trace,
                  "Write a Chrome trace-event JSON (one track group per rank) to this file");
  run->add_option("--max-model-len", o.session.engine.max_model_len,
                  "Context per sequence, prompt + completion (default: the model's)")
      ->check(at_least(1));
  run->add_option("--served-model-name", o.served_model_name,
                  "The \"model\" of OpenAI batch records and the name a request's \"model\" is "
                  "compared with (default: the model directory's name, a hash for a Hugging Face "
                  "cache snapshot)")
      ->check(not_empty("the model directory's name"));
  add_chat_template_option(*run, o.session.chat_template);
  add_layout_options(*run, o);
  run->add_option(
         "--dp", o.session.layout.dp,
         "Data-parallel replicas of the model, each --tp x --pp ranks with its own KV cache "
         "and scheduler, fed from one prompt stream into one output; default: ranks / "
         "(--tp x --pp) when both are given, else 1")
      ->check(at_least(1));
  add_choice<DpRouting>(
      *run, "--dp-routing", o.dp_routing,
      {{"prefix", DpRouting::kPrefix}, {"least-loaded", DpRouting::kLeastLoaded}},
      "With several replicas, which one a request goes to: prefix sends a request whose prompt "
      "starts as an earlier one's (its first 256 bytes: a few-shot header, a system prompt, a "
      "scored context) to the replica that took the earlier one, where that prefix is cached, "
      "unless another replica would idle; least-loaded, to whichever replica has room first");
}

void add_chat_template_option(CLI::App& c, std::string& path) {
  c.add_option("--chat-template", path,
               "Jinja chat template file for chat requests ('messages'), replacing the model's "
               "(chat_template.jinja, "
               "else tokenizer_config.json's chat_template)");
}

void add_log_interval_option(CLI::App& c, RunOptions& o) {
  c.add_option("--log-interval", o.session.engine.log_interval,
               "Seconds between progress lines when stderr is not a terminal (Slurm logs); a "
               "terminal gets one line updated in place")
      ->capture_default_str()
      ->check(finite_in(0, 1e9));
}

void add_layout_options(CLI::App& c, RunOptions& o) {
  c.add_option("--threads", o.session.placement.threads,
               "CPU threads per rank; default: cores of the node / ranks on the node")
      ->check(at_least(1));
  c.add_option("--tp", o.session.layout.tp,
               "Tensor-parallel ranks per stage; default: ranks per node (or ranks of a replica / "
               "--pp)")
      ->check(at_least(1));
  c.add_option("--pp", o.session.layout.pp,
               "Pipeline stages; default: number of nodes (or ranks / --tp)")
      ->check(at_least(1));
  c.add_option("--pp-layers", o.session.layout.pp_layers,
               "Layers per stage, e.g. 10,12,10 (default: even, remainder to the middle)")
      ->delimiter(',');
  c.add_flag("--allow-cross-node-tp", o.session.allow_cross_node_tp,
             "Do not warn when a TP group spans nodes");
  c.add_option(
       "--stall-timeout", o.stall_timeout,
       "Seconds a rank may go, after its first pipeline step, without finishing another before it "
       "ends "
       "the job (exit status 75): a hung rank or a lost message otherwise holds the job to its "
       "time limit. "
       "It warns at half; it must exceed the longest step (a large prefill on a CPU). 0: never")
      ->capture_default_str()
      ->check(finite_in(0, 1e9));
  c.add_option("--kv-cache-memory", o.session.engine.kv_cache_memory,
               "KV cache bytes per rank, e.g. 8GiB (default: 80% of the memory available after "
               "the weights, shared by the ranks on the same device; at most --max-seqs full "
               "contexts)");
  add_choice<DTypeChoice>(
      c, "--dtype", o.session.placement.dtype,
      {{"auto", DTypeChoice::kAuto},
       {"f32", DTypeChoice::kF32},
       {"bf16", DTypeChoice::kBF16},
       {"int8", DTypeChoice::kInt8}},
      "How weight matrices are held and read: f32, bf16 (half the memory and bytes per token; "
      "activations and accumulation stay f32), int8 (CPU only: a quarter of f32's bytes, quantized "
      "at load per row and group of k with an f32 scale each), or auto: bf16 on a GPU, f32 on the "
      "CPU");
  add_choice<DTypeChoice>(
      c, "--kv-dtype", o.session.kv_dtype,
      {{"auto", DTypeChoice::kAuto}, {"f32", DTypeChoice::kF32}, {"bf16", DTypeChoice::kBF16}},
      "How the KV cache holds keys and values: f32, bf16 (half the memory and the bytes attention "
      "reads), or auto: bf16 on a GPU with bf16 weights, else f32");
  add_choice<DeviceChoice>(
      c, "--device", o.session.placement.device,
      {{"auto", DeviceChoice::kAuto}, {"cpu", DeviceChoice::kCpu}, {"cuda", DeviceChoice::kCuda}},
      "Where each rank computes: cpu, cuda (GPU number = the rank's place on its node, modulo the "
      "GPUs it sees), or auto: cuda when this build has it and a GPU is visible");
  add_choice<CommChoice>(
      c, "--comm", o.session.placement.comm,
      {{"auto", CommChoice::kAuto}, {"mpi", CommChoice::kMpi}, {"nccl", CommChoice::kNccl}},
      "How a TP group's tensors and the hidden states between stages move: nccl (GPU memory, on "
      "the compute stream), mpi (host memory; GPU tensors staged through it), or auto: nccl on "
      "GPUs unless --share-gpus");
  c.add_flag("--eager", o.session.eager,
             "On a GPU, launch every kernel of every step (default: a pure-decode step is recorded "
             "as a CUDA graph once per step shape (tokens, logit rows) and replayed, which saves "
             "the launch overhead)");
  add_choice<bool>(
      c, "--prefix-caching", o.session.engine.prefix_caching, {{"on", true}, {"off", false}},
      "on: a prompt's full KV blocks already computed for another request (a shared few-shot "
      "prefix, a system prompt, a scored context) are reused, not recomputed; cached blocks no "
      "request holds are evicted least-recently-used when memory is needed. off: every prompt is "
      "computed whole");
  c.add_flag("--share-gpus", o.session.placement.share_gpus,
             "Allow more ranks on a node than GPUs: ranks then share GPUs round-robin (needs "
             "--comm mpi; for tests and small models)");
}

ServeOptions serve_options(const RunOptions& o, Continuation continuation) {
  ServeOptions serve;
  serve.stall_timeout = o.stall_timeout;
  serve.continuation = std::move(continuation);
  serve.defaults = o.defaults;
  serve.routing = o.dp_routing;
  return serve;
}

std::string served_model_name(const RunOptions& o) {
  return o.served_model_name.empty() ? model_name(o.session.model) : o.served_model_name;
}

std::string model_name(const std::string& model_dir) {
  std::filesystem::path p = std::filesystem::path(model_dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "dir/" ends in an empty name
  return p.filename().string();
}

}  // namespace tpllama
