// `tpllama bench`: a synthetic workload (seeded prompt token ids of fixed or ranged lengths,
// greedy, a fixed number of output tokens) through the real engine and pipeline, on a checkpoint
// or on a named shape with seeded random weights. Once the devices are open, the first rank on each
// measures its read bandwidth and GEMM peak (on the CPU its node with all of the node's cores; on a
// GPU a device-to-device copy and a cuBLAS GEMM), summed over the run's devices; the report puts
// each phase against them: decode as weight + KV bytes moved per second over the bandwidth, prefill
// as FLOP/s over the GEMM peak.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/bench_limits.h"
#include "app/bench_report.h"
#include "app/bench_workload.h"
#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/output_files.h"
#include "app/run_report.h"
#include "core/error.h"
#include "core/log.h"
#include "io/output_constraint.h"
#include "io/output_holds.h"
#include "io/result_writer.h"
#include "model/llama_model.h"
#include "model/shapes.h"
#include "ops/roofline.h"
#include "ops/threads.h"

namespace tpllama {

namespace {

// What the flags ask for, checked on every rank before the session opens: the model (a
// checkpoint's config.json, or a named shape with random weights) and the length ranges, which
// must fit its context.
struct BenchSetup {
  std::optional<SyntheticModel> synthetic;  // --shape --random-weights
  LengthRange in, out;
  std::optional<OutputConstraint> constraint;  // --response-format
};

BenchSetup check_bench_flags(const BenchOptions& o) {
  BenchSetup m;
  collective_phase([&] {
    if (o.run.session.model.empty() == o.shape.empty())
      fail("bench needs either --model DIR or --shape NAME --random-weights",
           o.shape.empty() ? "" : ", not both");
    if (!o.shape.empty() && !o.random_weights)
      fail("--shape ", o.shape, " has no weight files: add --random-weights");
    if (o.random_weights && o.shape.empty()) fail("--random-weights needs --shape");
    if (o.vocab > 0 && o.shape.empty()) fail("--vocab applies to --shape only");
    LlamaConfig config;
    if (!o.shape.empty()) {
      config = shape_config(o.shape, o.vocab);
      m.synthetic = SyntheticModel{config, o.seed};
    } else {
      config = load_llama_config(o.run.session.model + "/config.json");
    }
    if (!o.run.response_format.empty()) {
      m.constraint = checked_response_format(o.run.response_format);
      if (m.constraint && !o.shape.empty())
        fail(
            "--response-format needs the model's tokenizer: give --model a directory with one "
            "(convert --from random --tokenizer makes such a model) instead of --shape");
    }
    m.in = parse_range(o.input_len, "--input-len", 1);
    m.out = parse_range(o.output_len, "--output-len", 1);
    if (o.shared_prefix + m.in.hi + m.out.hi > config.max_seq_len)
      fail(o.shared_prefix > 0 ? "--shared-prefix " + std::to_string(o.shared_prefix) + " + "
                               : std::string(),
           "--input-len ", m.in.hi, " + --output-len ", m.out.hi,
           " exceeds the model's context of ", config.max_seq_len, " tokens");
  });
  return m;
}

}  // namespace

void add_bench_command(CLI::App& app, BenchOptions& o) {
  CLI::App* c =
      app.add_subcommand("bench",
                         "Throughput and latency of a synthetic workload on the real engine, "
                         "against this machine's measured bandwidth and GEMM peak");
  c->add_option("--model", o.run.session.model,
                "Hugging Face LLaMA model directory (or --shape with --random-weights)");
  c->add_option("--shape", o.shape, std::string("Named shape: ") + shape_names());
  c->add_flag("--random-weights", o.random_weights,
              "Seeded random weights made in memory (with --shape)");
  c->add_option("--seed", o.seed, "Seed of the random weights and of the prompts")
      ->capture_default_str()
      ->check(unsigned_64());
  c->add_option("--vocab", o.vocab, "Vocabulary size of the shape (default: the shape's)")
      ->check(at_least(1));
  c->add_option("--prompts", o.prompts, "Prompts in the workload (with --continuations: contexts)")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--shared-prefix", o.shared_prefix,
                "Every prompt starts with one seeded prefix of N tokens (BOS included) before its "
                "own --input-len "
                "tokens, as few-shot examples or a system prompt do")
      ->check(at_least(1));
  c->add_option("--continuations", o.continuations,
                "Score C continuations of --output-len tokens per prompt instead of generating "
                "(multiple-choice "
                "evaluation): --prompts x C scoring requests")
      ->check(at_least(1));
  c->add_option("--input-len", o.input_len,
                "Prompt tokens per request, BOS included: N or an inclusive range A:B")
      ->capture_default_str();
  c->add_option("--output-len", o.output_len,
                "Tokens generated per request (EOS ignored): N or A:B")
      ->capture_default_str();
  c->add_option("--max-seqs", o.max_seqs,
                "Sequences in flight at once (default: --prompts, at most 256)")
      ->check(at_least(1));
  c->add_option("--max-batch-tokens", o.run.session.engine.max_batch_tokens,
                "Tokens per forward step")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--kv-block-size", o.run.session.engine.kv_block_size,
                "Positions per KV cache block (default: 64 on a CPU, 16 on a GPU, at most the "
                "context)")
      ->check(CLI::Range(1, 4096));
  add_log_interval_option(*c, o.run);
  add_layout_options(*c, o.run);
  c->add_option("--response-format", o.run.response_format,
                "Constrain every request as `run --response-format` does (needs --model with a "
                "tokenizer), to compare with the same workload unconstrained");
  c->add_option("--json", o.json, "Write the report as JSON to this file");
  c->add_option("--stats", o.run.stats, "Also write the run's statistics JSON (as `run --stats`)");
  c->add_option("--trace", o.run.trace, "Write a Chrome trace of the run");
  c->add_flag("--no-limits", o.skip_limits,
              "Skip measuring bandwidth and GEMM peak (no roofline fractions)");
  c->add_flag("--op-split", o.op_split,
              "Time rank 0's forward op by op (each op finished before the next is timed, no "
              "CUDA graphs) and report where its time goes");
}

int bench_command(BenchOptions o, const MpiSession& mpi) {
  const BenchSetup setup = check_bench_flags(o);
  const LengthRange in = setup.in, out = setup.out;
  const Workload workload{o.prompts, in, out, o.shared_prefix, o.continuations};
  // The workload's defaults: every prompt in flight (at most 256), a context that fits them.
  EngineFlags& engine = o.run.session.engine;
  engine.max_seqs = o.max_seqs.value_or(std::min(workload.requests(), 256));
  if (!engine.max_model_len) engine.max_model_len = o.shared_prefix + in.hi + out.hi;

  TraceRecorder trace(
      !o.run.trace.empty());  // before the session: its communicators record into it
  SessionOptions options = o.run.session;
  options.synthetic = setup.synthetic;
  options.engine.context_flag =
      "--input-len + --output-len";  // they set the context (max_model_len above)
  OutputHolds holds;                 // rank 0's: --stats, --trace and --json, from the run's start
  Session session(mpi, options, [&](const Session& s) {
    if (!s.is_rank0()) return;
    const std::vector<std::pair<std::string, std::string>> outputs = {
        {"--stats", o.run.stats}, {"--trace", o.run.trace}, {"--json", o.json}};
    check_output_files({}, outputs, model_files(o.run.session.model));
    for (const auto& [flag, path] : outputs)
      if (output_is_a_file(path)) holds.hold(flag, path);
  });
  // A GPU is measured before the model takes its memory; the CPU after the run, so that the run
  // is the same run as without the probe (whose gigabyte of pages and all-core team it never
  // meets: scripts/bench/probe.sh).
  MachineLimits limits;
  bool measured_first = false;
  session.load([&](const Session& s) {
    measured_first = !o.skip_limits && s.device_context().device != Device::kCpu;
    if (measured_first) limits = measure_limits(mpi, s);
  });
  OpSplit split;
  if (o.op_split) session.split_ops(&split);
  SyntheticSource source(workload, session.config(), o.seed, setup.constraint);
  CountingSink sink;
  EngineIo io;
  io.reader = &source;
  io.writer = &sink;
  io.total_requests = workload.requests();
  const Continuation continuation{false, "run it again"};
  const RunSummary summary = session.serve(serve_options(o.run, continuation), io, trace);
  for (const std::string& path : {o.run.stats, o.run.trace, o.json})
    holds.release(path);  // write_text_file locks them
  const std::vector<RankFigures> figures =
      report_run(session, summary, trace, o.run.stats, o.run.trace);
  if (!o.skip_limits && !measured_first) limits = measure_limits(mpi, session);
  if (!session.is_rank0()) return 0;
  nlohmann::json report =
      make_report(o, BenchRun{session, summary, figures, limits, source, in, out});
  if (o.op_split) {
    // A rank's share of the machine's GEMM peak (every node's, split evenly over the ranks).
    const double rank_peak =
        limits.devices > 0 ? limits.gemm_flops / report["layout"]["ranks"].get<double>() : 0;
    report["op_split"] = {{"prefill", op_split_json(split.prefill, rank_peak)},
                          {"decode", op_split_json(split.decode, rank_peak)}};
  }
  print_report(report);
  if (!o.json.empty()) write_json_file(o.json, report, "--json");
  return finish_run(session, summary, continuation, "");
}

}  // namespace tpllama
