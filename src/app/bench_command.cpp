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

struct MachineLimits {
  double read_bandwidth = 0;    // bytes/s, summed over the devices of the run: the larger of
  double stream_bandwidth = 0;  // a stream far beyond the caches
  double weights_read = 0;      // and (CPU) reading the measuring ranks' own weights
  double gemm_flops = 0;        // FLOP/s of this build's GEMM in the run's dtype, summed likewise
  int devices = 0;              // nodes (CPU) or GPUs measured; 0: not measured
  std::string where;            // what was measured
};

// The first rank on each device measures it (on the CPU every core of its node; on a GPU the GPU)
// while the others wait without spinning; rank 0 gets the sums, since a run's work spreads over all
// of them (a decode step's bytes are every rank's matrices).
MachineLimits measure_limits(const MpiSession& mpi, const Session& s) {
  const DeviceContext ctx = s.device_context();
  std::vector<double> mine = {0, 0, 0, 0, 0};  // bandwidth, GEMM FLOP/s, devices, stream, weights
  int cores = 0;
  if (s.first_on_device()) {
    try {  // after a run, memory may be short: then the report has no roofline, the run's figures
      const ops::DeviceLimits measured =
          ops::measure_limits(ctx, s.dtype(), s.thread_placement(), s.weight_buffers());
      cores = measured.cores;
      mine = {measured.read_bandwidth, measured.gemm_flops, 1, measured.stream_bandwidth,
              measured.resident_read};
    } catch (const Error& e) {
      log::warn(std::string("the machine's limits were not measured: ") + e.what());
    }
  }
  mpi.quiet_barrier();
  const std::vector<double> sum = mpi.sum_to_root(mine);
  MachineLimits m;
  if (sum.empty()) return m;  // not rank 0
  m.read_bandwidth = sum[0];
  m.gemm_flops = sum[1];
  m.devices = static_cast<int>(sum[2]);
  m.stream_bandwidth = sum[3];
  m.weights_read = sum[4];
  const std::string n = std::to_string(m.devices);
  if (ctx.device != Device::kCpu)
    m.where = m.devices == 1 ? "1 GPU" : n + " GPUs";
  else
    m.where = m.devices == 1 ? std::to_string(cores) + " cores of 1 node"
                             : "all cores of " + n + " nodes";
  return m;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "812.3 GFLOP/s", or in TFLOP/s from 10 TFLOP/s up (GPUs).
std::string flops(double v) {
  return v >= 1e13 ? fixed(v / 1e12, 1) + " TFLOP/s" : fixed(v / 1e9, 1) + " GFLOP/s";
}

// A JSON number, or null when there is nothing to measure it by (a rate over no time, a fraction of
// an unmeasured limit): the table then shows "-", never a made-up 0.
nlohmann::json ratio(double amount, double over) {
  if (!(over > 0)) return nullptr;
  return amount / over;
}

// What the run computed and read, estimated from the model's shape: the roofline's side of the
// report.
struct WorkEstimate {
  double decode_bytes = 0;   // weights and KV the pure-decode steps read
  double prefill_flop = 0;   // FLOPs of the prompt tokens the prefill steps computed
  double prompt_tokens = 0;  // of the workload's prompts
};

WorkEstimate estimate_work(const Session& session, const RunSummary& s,
                           const std::vector<RankFigures>& figures, const SyntheticSource& source) {
  const LlamaConfig& c = session.config();
  const double layer_params =
      static_cast<double>(c.n_layers) *
      (2.0 * c.dim * c.q_dim() + 2.0 * c.dim * c.kv_dim() + 3.0 * c.dim * c.hidden_dim);
  double matrix_bytes = 0;
  for (const RankFigures& f : figures) matrix_bytes += f.matrix_bytes;
  const double kv_bytes_per_position =
      2.0 * c.kv_dim() * c.n_layers * static_cast<double>(dtype_size(session.kv_dtype()));
  WorkEstimate w;
  w.decode_bytes = static_cast<double>(s.phases.decode_steps) * matrix_bytes +
                   static_cast<double>(s.phases.decode_context_tokens) * kv_bytes_per_position;
  for (int len : source.prompt_lengths()) {
    // Attention: 4 FLOPs a (query element, position seen) pair, about len² / 2 pairs causally;
    // under a sliding window W, W (W + 1) / 2 + (len - W) W.
    const double window = c.sliding_window, positions = len;
    const double twice_pairs = c.sliding_window > 0 && len > c.sliding_window
                                   ? window * (window + 1) + 2.0 * (positions - window) * window
                                   : positions * positions;
    w.prefill_flop += 2.0 * len * layer_params + 2.0 * twice_pairs * c.q_dim() * c.n_layers +
                      2.0 * c.vocab_size * c.dim;
    w.prompt_tokens += len;
  }
  // Prompt positions the prefix cache served (and continuations scored) change what was computed:
  // the estimate is scaled to the prompt tokens the prefill steps computed.
  if (s.prompt_tokens > 0)
    w.prefill_flop *=
        static_cast<double>(s.phases.prefill_step_tokens) / static_cast<double>(s.prompt_tokens);
  return w;
}

// Each rank's time and weights.
nlohmann::json rank_figures_json(const std::vector<RankFigures>& figures) {
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < figures.size(); ++i) {
    const RankFigures& f = figures[i];
    ranks.push_back(
        {{"rank", i},
         {"compute_seconds", f.compute_seconds},
         {"collective_seconds", f.collective_seconds},
         {"wait_seconds", f.wait_seconds},
         {"bubble_fraction", ratio(f.wait_seconds, f.compute_seconds + f.wait_seconds)},
         {"weight_bytes", std::llround(f.weight_bytes)}});  // a count: an integer in JSON
  }
  return ranks;
}

// The run's setup: the model and its shape, the dtypes, the device and the layout.
nlohmann::json setup_json(const BenchOptions& o, const Session& session) {
  const LlamaConfig& c = session.config();
  const Topology& t = session.topology();
  nlohmann::json j = {
      {"model", o.run.session.model.empty() ? o.shape + " (random weights)" : o.run.session.model},
      {"config",
       {{"dim", c.dim},
        {"hidden", c.hidden_dim},
        {"layers", c.n_layers},
        {"heads", c.n_heads},
        {"kv_heads", c.n_kv_heads},
        {"vocab", c.vocab_size}}},
      {"dtype", dtype_name(session.dtype())},
      {"kv_dtype", dtype_name(session.kv_dtype())},
      {"device", session.device_description()},
      {"layout",
       {{"ranks", t.world_size()},
        {"tp", t.tp_size()},
        {"pp", t.pp_size()},
        {"threads_per_rank", session.threads()},
        {"nodes", session.nodes().n_nodes}}},
  };
  return j;
}

// The workload as the flags asked for it and as the source drew it (prompt_tokens: the prompts'
// tokens).
nlohmann::json workload_json(const BenchOptions& o, const SyntheticSource& source, LengthRange in,
                             LengthRange out, double prompt_tokens) {
  const double prompts = static_cast<double>(o.prompts);
  nlohmann::json j = {
      {"prompts", o.prompts},
      {"shared_prefix", o.shared_prefix},
      {"continuations", o.continuations},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"input_len_min", in.lo},
      {"input_len_max", in.hi},
      {"output_len_min", out.lo},
      {"output_len_max", out.hi},
      {"mean_input_len", prompt_tokens / prompts},
      {"mean_output_len", static_cast<double>(source.output_tokens()) / prompts},
      {"seed", o.seed},
      {"max_seqs", o.run.session.engine.max_seqs},
      {"max_batch_tokens", o.run.session.engine.max_batch_tokens},
  };
  return j;
}

// Throughput and latency as the engine measured them: the whole run, its prefill and decode
// phases, the prefix cache.
nlohmann::json throughput_json(const RunSummary& s) {
  const double decode_tokens = static_cast<double>(s.phases.decode_step_tokens);
  const bool decoded = s.phases.decode_steps > 0 && s.phases.decode_seconds > 0;
  nlohmann::json j = {
      {"elapsed_seconds", s.seconds},
      {"steps", s.steps},
      {"requests", s.records.requests},
      {"requests_per_second", ratio(static_cast<double>(s.records.requests), s.seconds)},
      {"prompt_tokens", s.prompt_tokens},
      {"generated_tokens", s.generated_tokens},
      {"prefill_tokens_per_second",
       ratio(static_cast<double>(s.phases.prefill_step_tokens), s.phases.prefill_seconds)},
      {"decode_tokens_per_second",
       decoded ? ratio(decode_tokens, s.phases.decode_seconds) : nullptr},
      {"output_tokens_per_second", ratio(static_cast<double>(s.generated_tokens), s.seconds)},
      {"total_tokens_per_second",
       ratio(static_cast<double>(s.prompt_tokens + s.generated_tokens), s.seconds)},
      {"prefill_seconds", s.phases.prefill_seconds},
      {"prefix_cache",
       {{"enabled", s.prefix_caching},
        {"prompt_tokens", s.prefix.prompt_tokens},
        {"hit_tokens", s.prefix.hit_tokens},
        {"evicted_blocks", s.prefix.evicted_blocks},
        {"hit_rate", ratio(static_cast<double>(s.prefix.hit_tokens),
                           static_cast<double>(s.prefix.prompt_tokens))}}},
      {"decode_seconds", s.phases.decode_seconds},
      {"decode_steps", s.phases.decode_steps},
      {"ttft_seconds", percentiles(s.latency.ttft)},
      {"ttft_from_start_seconds", percentiles(s.latency.ttft_from_start)},
      {"latency_from_start_seconds", percentiles(s.latency.latency_from_start)},
      {"tpot_seconds", percentiles(s.latency.tpot)},
      {"finished_stop", s.records.finished_stop},
      {"finished_length", s.records.finished_length},
      {"structured_outputs",
       s.structured.requests == 0
           ? nlohmann::json(nullptr)
           : nlohmann::json{{"requests", s.structured.requests},
                            {"grammars_compiled", s.structured.grammars_compiled},
                            {"compile_seconds", s.structured.compile_seconds},
                            {"masks", s.structured.masks.count()},
                            {"masks_walked", s.structured.masks_walked},
                            {"mask_seconds", percentiles(s.structured.masks)}}},
  };
  return j;
}

// The roofline: the bytes decode read and the FLOPs prefill computed, per second and as fractions
// of the machine's measured limits (null where there is nothing to measure them by).
nlohmann::json roofline_json(const RunSummary& s, const WorkEstimate& work,
                             const MachineLimits& limits) {
  const double decode_bytes = work.decode_bytes;
  const double decode_tokens = static_cast<double>(s.phases.decode_step_tokens);
  const bool measured = limits.devices > 0,
             decoded = s.phases.decode_steps > 0 && s.phases.decode_seconds > 0;
  const nlohmann::json decode_bw = decoded ? ratio(decode_bytes, s.phases.decode_seconds) : nullptr;
  const nlohmann::json prefill_flops = ratio(work.prefill_flop, s.phases.prefill_seconds);
  nlohmann::json machine = nullptr;
  if (measured)
    machine = {{"measured_on", limits.where},
               {"devices", limits.devices},
               {"read_bandwidth_bytes_per_second", limits.read_bandwidth},
               {"stream_bytes_per_second", limits.stream_bandwidth},
               {"weights_read_bytes_per_second",
                limits.weights_read > 0 ? nlohmann::json(limits.weights_read) : nullptr},
               {"gemm_flops_per_second", limits.gemm_flops}};
  nlohmann::json j = {
      {"machine", machine},
      {"decode_bytes_per_token", decoded ? ratio(decode_bytes, decode_tokens) : nullptr},
      {"decode_bandwidth_bytes_per_second", decode_bw},
      {"decode_bandwidth_fraction",
       decoded && measured ? ratio(decode_bw.get<double>(), limits.read_bandwidth) : nullptr},
      {"decode_roofline_tokens_per_second",
       decoded && measured ? ratio(limits.read_bandwidth, decode_bytes / decode_tokens) : nullptr},
      {"prefill_flops_per_second", prefill_flops},
      {"prefill_gemm_fraction", measured && !prefill_flops.is_null()
                                    ? ratio(prefill_flops.get<double>(), limits.gemm_flops)
                                    : nullptr},
  };
  return j;
}

// The report: one table on stdout, the same figures as JSON (one object: the parts' keys are
// distinct).
nlohmann::json make_report(const BenchOptions& o, const Session& session, const RunSummary& s,
                           const std::vector<RankFigures>& figures, const MachineLimits& limits,
                           const SyntheticSource& source, LengthRange in, LengthRange out) {
  const WorkEstimate work = estimate_work(session, s, figures, source);
  nlohmann::json j = setup_json(o, session);
  j["workload"] = workload_json(o, source, in, out, work.prompt_tokens);
  j.update(throughput_json(s));
  j.update(roofline_json(s, work, limits));
  j["ranks"] = rank_figures_json(figures);
  return j;
}

// A row of the table: its name padded to 34 columns, then its value.
void add_row(std::ostream& os, const std::string& name, const std::string& value) {
  os << "  " << name << std::string(name.size() < 34 ? 34 - name.size() : 1, ' ') << value << '\n';
}

// A figure of the JSON, scaled, or "-" where it is null.
std::string figure(const nlohmann::json& v, double scale, int digits) {
  return v.is_null() ? std::string("-") : fixed(v.get<double>() * scale, digits);
}

// A FLOP rate of the JSON, or "- FLOP/s" where it is null.
std::string flop_rate(const nlohmann::json& v) {
  return v.is_null() ? std::string("- FLOP/s") : flops(v.get<double>());
}

// "p50 / p90 / p99" of a percentiles object, scaled, or "-" where it is null (no request had one).
std::string p50_p90_p99(const nlohmann::json& h, double scale) {
  if (h.is_null()) return std::string("-");
  return figure(h["p50"], scale, 2) + " / " + figure(h["p90"], scale, 2) + " / " +
         figure(h["p99"], scale, 2);
}

// " = 12.3% of <limit>", or nothing when the limit was not measured.
std::string share_of(const nlohmann::json& v, const std::string& limit) {
  return v.is_null() ? std::string() : " = " + figure(v, 100, 1) + "% of " + limit;
}

// The first line: what ran, where, and the workload.
std::string report_title(const nlohmann::json& j) {
  std::ostringstream os;
  const auto& l = j["layout"];
  const auto& w = j["workload"];
  os << "tpllama bench: " << j["model"].get<std::string>() << ", " << j["dtype"].get<std::string>()
     << " on " << j["device"].get<std::string>() << ", " << l["ranks"] << " rank(s) = tp "
     << l["tp"] << " x pp " << l["pp"] << ", " << l["threads_per_rank"] << " thread(s) per rank; "
     << w["prompts"] << " prompts, input " << w["input_len"].get<std::string>() << ", output "
     << w["output_len"].get<std::string>() << ", max-seqs " << w["max_seqs"] << ", seed "
     << w["seed"] << '\n';
  return os.str();
}

// The machine's limits, then prefill and decode against them.
void roofline_rows(std::ostream& os, const nlohmann::json& j) {
  const auto& m = j["machine"];
  if (m.is_null())
    add_row(os, "machine", "not measured (--no-limits)");
  else
    add_row(os, "machine (" + m["measured_on"].get<std::string>() + ")",
            "read " + fixed(m["read_bandwidth_bytes_per_second"].get<double>() / 1e9, 1) +
                " GB/s, GEMM " + flops(m["gemm_flops_per_second"].get<double>()));
  add_row(os, "prefill",
          figure(j["prefill_tokens_per_second"], 1, 1) + " tok/s, " +
              flop_rate(j["prefill_flops_per_second"]) +
              share_of(j["prefill_gemm_fraction"], "the GEMM peak"));
  if (j["decode_tokens_per_second"].is_null())
    add_row(os, "decode",
            "- (no pure-decode step: every token came from a step with prompt tokens)");
  else
    add_row(os, "decode",
            figure(j["decode_tokens_per_second"], 1, 1) + " tok/s, " +
                figure(j["decode_bandwidth_bytes_per_second"], 1e-9, 1) + " GB/s" +
                share_of(j["decode_bandwidth_fraction"], "read bandwidth") +
                (j["decode_roofline_tokens_per_second"].is_null()
                     ? std::string()
                     : " (roofline " + figure(j["decode_roofline_tokens_per_second"], 1, 1) +
                           " tok/s)"));
}

// The whole run's throughput and the prefix cache.
void throughput_rows(std::ostream& os, const nlohmann::json& j) {
  add_row(os, "output / total",
          figure(j["output_tokens_per_second"], 1, 1) + " / " +
              figure(j["total_tokens_per_second"], 1, 1) + " tok/s, " +
              figure(j["requests_per_second"], 1, 2) + " req/s over " +
              fixed(j["elapsed_seconds"].get<double>(), 2) + " s, " +
              std::to_string(j["steps"].get<long long>()) + " steps");
  const auto& pc = j["prefix_cache"];
  if (pc["enabled"].get<bool>())
    add_row(os, "prefix cache",
            figure(pc["hit_rate"], 100, 1) + "% of prompt tokens (" +
                std::to_string(pc["hit_tokens"].get<long long>()) + " of " +
                std::to_string(pc["prompt_tokens"].get<long long>()) + "), " +
                std::to_string(pc["evicted_blocks"].get<long long>()) + " blocks evicted");
  else
    add_row(os, "prefix cache", "off");
  const auto& so = j["structured_outputs"];
  if (!so.is_null())
    add_row(os, "structured outputs",
            std::to_string(so["requests"].get<long long>()) + " requests (" +
                std::to_string(j["finished_stop"].get<long long>()) +
                " ended by their grammar), compiled in " +
                fixed(so["compile_seconds"].get<double>() * 1e3, 2) + " ms; masks " +
                figure(so["mask_seconds"]["mean"], 1e3, 3) + " ms mean, " +
                figure(so["mask_seconds"]["p99"], 1e3, 3) + " ms p99, " +
                std::to_string(so["masks_walked"].get<long long>()) + " of " +
                std::to_string(so["masks"].get<long long>()) + " walked");
}

// The latencies in milliseconds, then each rank's time.
void latency_and_rank_rows(std::ostream& os, const nlohmann::json& j) {
  add_row(os, "TTFT p50 / p90 / p99",
          p50_p90_p99(j["ttft_seconds"], 1e3) + " ms from admission, " +
              p50_p90_p99(j["ttft_from_start_seconds"], 1e3) + " ms from the start");
  add_row(os, "TPOT p50 / p90 / p99", p50_p90_p99(j["tpot_seconds"], 1e3) + " ms");
  add_row(os, "latency p50 / p90 / p99",
          p50_p90_p99(j["latency_from_start_seconds"], 1e3) + " ms from the start");
  for (const auto& r : j["ranks"])
    add_row(os, "rank " + std::to_string(r["rank"].get<int>()),
            "compute " + fixed(r["compute_seconds"].get<double>(), 3) + " s (collectives " +
                fixed(r["collective_seconds"].get<double>(), 3) + " s of it), waiting " +
                fixed(r["wait_seconds"].get<double>(), 3) + " s, bubble " +
                figure(r["bubble_fraction"], 100, 1) + "%");
}

// Rank 0's forward op by op, the costliest first: seconds, share of the forward, calls, and the
// FLOP rate of its matrix products; then its GEMMs together, against rank_peak (a rank's share of
// the machine's GEMM peak; 0: not measured).
nlohmann::json op_split_json(const OpSplit::Phase& split, double rank_peak) {
  std::vector<std::pair<std::string, OpSplit::Entry>> ops(split.ops.begin(), split.ops.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  nlohmann::json list = nlohmann::json::array();
  double timed = 0, gemm_seconds = 0, gemm_flops = 0;
  for (const auto& [name, e] : ops) {
    list.push_back({{"op", name},
                    {"seconds", e.seconds},
                    {"fraction", ratio(e.seconds, split.forward_seconds)},
                    {"calls", e.calls},
                    {"flops_per_second", e.flops > 0 ? ratio(e.flops, e.seconds) : nullptr}});
    timed += e.seconds;
    if (e.flops > 0) {
      gemm_seconds += e.seconds;
      gemm_flops += e.flops;
    }
  }
  const nlohmann::json gemm_rate = gemm_flops > 0 ? ratio(gemm_flops, gemm_seconds) : nullptr;
  return {{"forward_seconds", split.forward_seconds},
          {"forwards", split.forwards},
          {"untimed_seconds", std::max(0.0, split.forward_seconds - timed)},
          {"ops", list},
          {"gemm_flops_per_second", gemm_rate},
          {"gemm_peak_fraction", !gemm_rate.is_null() && rank_peak > 0
                                     ? ratio(gemm_rate.get<double>(), rank_peak)
                                     : nullptr}};
}

void op_split_rows(std::ostream& os, const nlohmann::json& j) {
  if (!j.contains("op_split")) return;
  for (const char* phase : {"prefill", "decode"}) {
    const nlohmann::json& s = j["op_split"][phase];
    if (s["forwards"].get<long long>() == 0) continue;
    add_row(os, std::string("op split, ") + phase + " steps (rank 0)",
            fixed(s["forward_seconds"].get<double>(), 3) + " s in " +
                std::to_string(s["forwards"].get<long long>()) + " forward passes");
    for (const nlohmann::json& e : s["ops"])
      add_row(os, "  " + e["op"].get<std::string>(),
              fixed(e["seconds"].get<double>(), 3) + " s = " + figure(e["fraction"], 100, 1) +
                  "% (" + std::to_string(e["calls"].get<long long>()) + " calls)" +
                  (e["flops_per_second"].is_null() ? "" : ", " + flop_rate(e["flops_per_second"])));
    add_row(os, "  between ops", fixed(s["untimed_seconds"].get<double>(), 3) + " s");
    if (!s["gemm_flops_per_second"].is_null())
      add_row(os, "  GEMMs together",
              flop_rate(s["gemm_flops_per_second"]) +
                  share_of(s["gemm_peak_fraction"], "a rank's GEMM peak"));
  }
}

void print_report(const nlohmann::json& j) {
  std::ostringstream os;
  os << report_title(j);
  roofline_rows(os, j);
  throughput_rows(os, j);
  latency_and_rank_rows(os, j);
  op_split_rows(os, j);
  std::fputs(os.str().c_str(), stdout);
  std::fflush(stdout);
}

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
  c->add_option("--max-seqs", o.run.session.engine.max_seqs,
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
  if (o.run.session.engine.max_seqs <= 0)
    o.run.session.engine.max_seqs = std::min(workload.requests(), 256);
  if (o.run.session.max_model_len <= 0)
    o.run.session.max_model_len = o.shared_prefix + in.hi + out.hi;

  TraceRecorder trace(
      !o.run.trace.empty());  // before the session: its communicators record into it
  SessionOptions options = o.run.session;
  options.synthetic = setup.synthetic;
  options.context_flag =
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
  // meets: scripts/bench_probe.sh).
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
  nlohmann::json report = make_report(o, session, summary, figures, limits, source, in, out);
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
