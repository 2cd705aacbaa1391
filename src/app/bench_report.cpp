// Bench's report: its JSON parts and its table.
#include "app/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "app/bench_roofline.h"
#include "app/run_report.h"
#include "core/dtype.h"

namespace tpllama {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "812.3 GFLOP/s", or in TFLOP/s from 10 TFLOP/s up (GPUs).
std::string flops(double v) {
  return v >= 1e13 ? fixed(v / 1e12, 1) + " TFLOP/s" : fixed(v / 1e9, 1) + " GFLOP/s";
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

}  // namespace

nlohmann::json make_report(const BenchOptions& o, const BenchRun& run) {
  const WorkEstimate work = estimate_work(run.session, run.summary, run.figures, run.source);
  nlohmann::json j = setup_json(o, run.session);
  j["workload"] = workload_json(o, run.source, run.in, run.out, work.prompt_tokens);
  j.update(throughput_json(run.summary));
  j.update(roofline_json(run.summary, work, run.limits));
  j["ranks"] = rank_figures_json(run.figures);
  return j;
}

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

}  // namespace tpllama
