// Run reports: per-rank lines, stats JSON (fields modelled on trtllm-bench), Chrome trace, and a
// run's last lines.
#include "app/run_report.h"

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "engine/block_pool.h"
#include "io/result_writer.h"
#include "parallel/mpi_session.h"

namespace tpllama {
namespace {

double bubble(const RankFigures& f) {
  const double total = f.compute_seconds + f.wait_seconds;
  return total > 0 ? f.wait_seconds / total : 0.0;
}

// Bus bandwidth of the all-reduces, as nccl-tests defines it: algbw * 2(n-1)/n.
double bus_bandwidth(const RankFigures& f, int tp) {
  if (f.all_reduce_seconds <= 0 || tp < 2) return 0;
  return f.all_reduce_bytes / f.all_reduce_seconds * 2.0 * (tp - 1) / tp;
}

// A count that crossed the gather as a double, written back as the integer it is (JSON "3072", not
// "3072.0"): exact up to 2^53, beyond any byte or step count of a run.
long long as_count(double x) {
  return std::llround(x);
}

// Each rank's figures for --stats, with its place in the layout.
nlohmann::json rank_stats(const Topology& t, const std::vector<RankFigures>& all) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < t.world_size(); ++r) {
    const RankFigures& f = all[static_cast<size_t>(r)];
    ranks.push_back({{"rank", r},
                     {"replica", t.replica_of(r)},
                     {"tp_rank", t.tp_rank_of(r)},
                     {"pp_rank", t.pp_rank_of(r)},
                     {"peak_memory_bytes", as_count(f.peak_memory_bytes)},
                     {"weight_bytes", as_count(f.weight_bytes)},
                     {"kv_cache_bytes", as_count(f.kv_cache_bytes)},
                     {"kv_capacity_tokens", as_count(f.kv_capacity_tokens)},
                     {"steps", as_count(f.steps)},
                     {"compute_seconds", f.compute_seconds},
                     {"wait_seconds", f.wait_seconds},
                     {"collective_seconds", f.collective_seconds},
                     {"p2p_seconds", f.p2p_seconds},
                     {"bubble_fraction", bubble(f)},
                     {"all_reduce_calls", as_count(f.all_reduce_calls)},
                     {"all_reduce_bytes", as_count(f.all_reduce_bytes)},
                     {"all_reduce_bus_bandwidth_bytes_per_second", bus_bandwidth(f, t.tp_size())}});
  }
  return ranks;
}

void write_stats(const std::string& path, const Topology& t, int n_nodes,
                 const std::vector<RankFigures>& all, const RunSummary& s) {
  double compute = 0, wait = 0;
  for (int r = 0; r < t.world_size(); ++r) {
    compute += all[static_cast<size_t>(r)].compute_seconds;
    wait += all[static_cast<size_t>(r)].wait_seconds;
  }
  const double secs = s.seconds > 0 ? s.seconds : 1e-9;
  nlohmann::json j = {
      {"layout",
       {{"world_size", t.world_size()},
        {"dp", t.dp_size()},
        {"tp", t.tp_size()},
        {"pp", t.pp_size()},
        {"nodes", n_nodes}}},
      {"requests", s.records.requests},
      {"finished_stop", s.records.finished_stop},
      {"finished_length", s.records.finished_length},
      {"scored", s.records.scored},
      {"errors", s.records.errors},
      {"skipped_already_done", s.skipped},
      {"unmatched_resumed_records", s.unmatched_records},
      {"stopped_by_signal", s.stopped_by},
      {"abandoned_requests", s.abandoned},
      {"unwritten_ordered_results", s.unwritten},
      {"preemptions", s.preemptions},
      {"prefix_cache",
       {{"enabled", s.prefix_caching},
        {"prompt_tokens", s.prefix.prompt_tokens},
        {"hit_tokens", s.prefix.hit_tokens},
        {"hit_rate", s.prefix.prompt_tokens > 0 ? static_cast<double>(s.prefix.hit_tokens) /
                                                      static_cast<double>(s.prefix.prompt_tokens)
                                                : 0.0},
        {"recompute_hit_tokens", s.prefix.recompute_hits},
        {"evicted_blocks", s.prefix.evicted_blocks}}},
      {"steps", s.steps},
      {"elapsed_seconds", s.seconds},
      {"requests_per_second", static_cast<double>(s.records.requests) / secs},
      {"prompt_tokens", s.prompt_tokens},
      // Prompt positions the forward computed: a prefix cache hit and the prompt a request's n
      // samples share are not computed, a preempted sequence's are again.
      {"prompt_tokens_computed", s.phases.prefill_step_tokens},
      {"generated_tokens", s.generated_tokens},
      {"output_tokens_per_second", static_cast<double>(s.generated_tokens) / secs},
      {"output_tokens_per_second_per_rank",
       static_cast<double>(s.generated_tokens) / secs / t.world_size()},
      {"total_tokens_per_second", static_cast<double>(s.generated_tokens + s.prompt_tokens) / secs},
      {"ttft_seconds", percentiles(s.latency.ttft)},
      {"tpot_seconds", percentiles(s.latency.tpot)},
      {"ttft_from_start_seconds", percentiles(s.latency.ttft_from_start)},
      {"latency_from_start_seconds", percentiles(s.latency.latency_from_start)},
      {"structured_outputs",
       {{"requests", s.structured.requests},
        {"grammars_compiled", s.structured.grammars_compiled},
        {"compile_seconds", s.structured.compile_seconds},
        {"masks", s.structured.masks.count()},
        {"masks_walked", s.structured.masks_walked},
        {"mask_seconds", percentiles(s.structured.masks)}}},
      {"bubble_fraction", compute + wait > 0 ? wait / (compute + wait) : 0.0},
      {"ranks", rank_stats(t, all)},
  };
  if (!s.replicas.empty()) {
    nlohmann::json replicas = nlohmann::json::array();
    for (size_t r = 0; r < s.replicas.size(); ++r) {
      const ReplicaFigures& f = s.replicas[r];
      const double run = f.seconds > 0 ? f.seconds : 1e-9;
      replicas.push_back({{"replica", r},
                          {"leader_rank", static_cast<int>(r) * t.replica_size()},
                          {"requests", f.records},
                          {"prompt_tokens", f.prompt_tokens},
                          {"generated_tokens", f.generated_tokens},
                          {"steps", f.steps},
                          {"preemptions", f.preemptions},
                          {"elapsed_seconds", f.seconds},
                          {"busy_fraction", f.busy_seconds / run},
                          {"waiting_for_work_seconds", f.waiting_seconds}});
    }
    j["replicas"] = std::move(replicas);
  }
  write_json_file(path, j, "--stats");
}

void write_trace(const MpiSession& mpi, const Topology& t, const TraceRecorder& trace,
                 const std::string& path) {
  const std::vector<std::vector<uint8_t>> per_rank = mpi.gather_to_root(trace.serialize());
  if (t.rank() != 0) return;
  std::vector<std::string> labels;
  for (int r = 0; r < t.world_size(); ++r) {
    // Perfetto sorts the processes by name: a replica's ranks together.
    labels.push_back((t.dp_size() > 1 ? "replica " + std::to_string(t.replica_of(r)) + ", " : "") +
                     "rank " + std::to_string(r) + " (tp " + std::to_string(t.tp_rank_of(r)) +
                     ", pp " + std::to_string(t.pp_rank_of(r)) + ")");
  }
  write_text_file(path, TraceRecorder::to_chrome_json(per_rank, labels) + "\n", "--trace");
  log::info("trace written to " + path +
            " (open it in https://ui.perfetto.dev or chrome://tracing)");
}

}  // namespace

nlohmann::json percentiles(const LatencyHistogram& h) {
  if (h.count() == 0) return nullptr;
  return {{"p50", h.percentile(50)},
          {"p90", h.percentile(90)},
          {"p99", h.percentile(99)},
          {"mean", h.mean()},
          {"count", h.count()}};
}

std::vector<RankFigures> report_run(const Session& session, const RunSummary& summary,
                                    const TraceRecorder& trace, const std::string& stats_path,
                                    const std::string& trace_path) {
  const RankFigures mine = session.rank_figures();
  const Topology& t = session.topology();
  std::vector<RankFigures> all(t.rank() == 0 ? static_cast<size_t>(t.world_size()) : 0);
  session.mpi().gather_to_root(&mine, sizeof mine, all.data());
  if (t.rank() == 0) {
    if (t.world_size() > 1)
      for (int r = 0; r < t.world_size(); ++r) {
        const RankFigures& f = all[static_cast<size_t>(r)];
        std::ostringstream os;
        os.setf(std::ios::fixed);
        os.precision(3);
        os << "rank " << r << ": compute " << f.compute_seconds << " s, waiting " << f.wait_seconds
           << " s (bubble " << 100 * bubble(f) << "%), collectives " << f.collective_seconds
           << " s, point-to-point " << f.p2p_seconds << " s, peak memory "
           << mib(f.peak_memory_bytes);
        log::info(os.str());
      }
    if (!stats_path.empty()) write_stats(stats_path, t, session.nodes().n_nodes, all, summary);
  }
  if (!trace_path.empty()) write_trace(session.mpi(), t, trace, trace_path);
  return all;
}

int finish_run(const Session& session, const RunSummary& summary, const Continuation& continuation,
               const std::string& done_note, const std::vector<std::string>& warnings) {
  if (summary.stopped_by != 0) {
    log::warn("stopped early: " + summary.describe() + "; exit status " +
              std::to_string(kExitStoppedEarly) +
              (continuation.resumable ? ": run again with --resume to continue"
                                      : ": " + continuation.restart_hint));
    return kExitStoppedEarly;
  }
  log::info("done: " + summary.describe() + done_note);
  for (const std::string& w : warnings) log::warn(w);
  const long long finished = summary.records.finished_stop + summary.records.finished_length;
  if (summary.records.errors > 0 && finished == 0 && summary.records.scored == 0 &&
      summary.skipped == 0) {
    // The records are written, but a job whose every request failed (a wrong format, prompts all
    // too long) should not look like a success to Slurm. Not after --resume skipped records: the
    // earlier part of the job may have answered requests.
    log::error("every request of this run failed (" + std::to_string(summary.records.errors) +
               " error records); exit status " + std::to_string(kExitAllRequestsFailed));
    return kExitAllRequestsFailed;
  }
  if (finished == 0) return 0;
  const double avg = static_cast<double>(summary.prompt_tokens + summary.generated_tokens) /
                     static_cast<double>(finished);
  const EngineConfig& e = session.engine_config();
  const int block_size = e.kv_block_size;
  const double capacity = static_cast<double>(e.kv_blocks) * block_size;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(0);
  os << "KV capacity " << capacity << " tokens = about "
     << std::floor(sequences_held(e.kv_blocks, block_size, avg))
     << " concurrent sequences at this run's average request length of " << avg
     << " tokens (--max-seqs " << e.max_seqs << ")";
  log::info(os.str());
  return 0;
}

}  // namespace tpllama
