// Run reports: per-rank lines, stats JSON (fields modelled on trtllm-bench), Chrome trace.
#include "app/run_report.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "parallel/mpi_comm.h"

namespace tpllama {
namespace {

constexpr int kFigureCount = sizeof(RankFigures) / sizeof(double);

std::string mib(double bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << bytes / (1 << 20) << " MiB";
  return os.str();
}

double bubble(const RankFigures& f) {
  const double total = f.compute_seconds + f.wait_seconds;
  return total > 0 ? f.wait_seconds / total : 0.0;
}

// Bus bandwidth of the all-reduces, as nccl-tests defines it: algbw * 2(n-1)/n.
double bus_bandwidth(const RankFigures& f, int tp) {
  if (f.all_reduce_seconds <= 0 || tp < 2) return 0;
  return f.all_reduce_bytes / f.all_reduce_seconds * 2.0 * (tp - 1) / tp;
}

void write_stats(const std::string& path, const Topology& t, int n_nodes, const std::vector<RankFigures>& all,
                 const RunSummary& s) {
  nlohmann::json ranks = nlohmann::json::array();
  double compute = 0, wait = 0;
  for (int r = 0; r < t.world_size(); ++r) {
    const RankFigures& f = all[static_cast<size_t>(r)];
    Topology peer(t.world_size(), r, t.tp_size(), t.pp_size(), t.n_layers(), {});
    compute += f.compute_seconds;
    wait += f.wait_seconds;
    ranks.push_back({{"rank", r},
                     {"tp_rank", peer.tp_rank()},
                     {"pp_rank", peer.pp_rank()},
                     {"peak_memory_bytes", f.peak_memory_bytes},
                     {"weight_bytes", f.weight_bytes},
                     {"kv_cache_bytes", f.kv_cache_bytes},
                     {"kv_capacity_tokens", f.kv_capacity_tokens},
                     {"steps", f.steps},
                     {"compute_seconds", f.compute_seconds},
                     {"wait_seconds", f.wait_seconds},
                     {"collective_seconds", f.collective_seconds},
                     {"p2p_seconds", f.p2p_seconds},
                     {"bubble_fraction", bubble(f)},
                     {"all_reduce_calls", f.all_reduce_calls},
                     {"all_reduce_bytes", f.all_reduce_bytes},
                     {"all_reduce_bus_bandwidth_bytes_per_second", bus_bandwidth(f, t.tp_size())}});
  }
  const double secs = s.seconds > 0 ? s.seconds : 1e-9;
  nlohmann::json j = {
      {"layout", {{"world_size", t.world_size()}, {"tp", t.tp_size()}, {"pp", t.pp_size()}, {"nodes", n_nodes}}},
      {"requests", s.requests},
      {"finished_stop", s.finished_stop},
      {"finished_length", s.finished_length},
      {"scored", s.scored},
      {"errors", s.errors},
      {"skipped_already_done", s.skipped},
      {"unmatched_resumed_records", s.unmatched_records},
      {"stopped_by_signal", s.stopped_by},
      {"abandoned_requests", s.abandoned},
      {"unwritten_ordered_results", s.unwritten},
      {"preemptions", s.preemptions},
      {"steps", s.steps},
      {"elapsed_seconds", s.seconds},
      {"requests_per_second", static_cast<double>(s.requests) / secs},
      {"prompt_tokens", s.prompt_tokens},
      {"generated_tokens", s.generated_tokens},
      {"output_tokens_per_second", static_cast<double>(s.generated_tokens) / secs},
      {"output_tokens_per_second_per_rank", static_cast<double>(s.generated_tokens) / secs / t.world_size()},
      {"total_tokens_per_second", static_cast<double>(s.generated_tokens + s.prompt_tokens) / secs},
      {"ttft_seconds", percentiles(s.ttft)},
      {"tpot_seconds", percentiles(s.tpot)},
      {"ttft_from_start_seconds", percentiles(s.ttft_from_start)},
      {"latency_from_start_seconds", percentiles(s.latency_from_start)},
      {"bubble_fraction", compute + wait > 0 ? wait / (compute + wait) : 0.0},
      {"ranks", ranks},
  };
  write_json_file(path, j, "--stats");
}

}  // namespace

void write_json_file(const std::string& path, const nlohmann::json& j, const char* flag) {
  write_text_file(path, j.dump(2) + "\n", flag);
}

nlohmann::json percentiles(const LatencyHistogram& h) {
  if (h.count() == 0) return nullptr;
  return {{"p50", h.percentile(50)}, {"p90", h.percentile(90)}, {"p99", h.percentile(99)}, {"mean", h.mean()},
          {"count", h.count()}};
}

RankFigures collect_rank_figures(const ModelWeights& weights, const KvCache& cache, const PipelineStats& pipeline,
                                 std::initializer_list<const Communicator*> comms) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  RankFigures f;
  f.peak_memory_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
  f.weight_bytes = static_cast<double>(weights.bytes_held);
  f.matrix_bytes = static_cast<double>(weights.matrix_bytes);
  f.kv_cache_bytes = static_cast<double>(cache.bytes());
  f.kv_capacity_tokens = static_cast<double>(cache.n_blocks()) * cache.block_size();
  f.compute_seconds = pipeline.compute_seconds;
  f.wait_seconds = pipeline.wait_seconds;
  for (const Communicator* c : comms) {
    const CommStats& s = c->stats();
    f.collective_seconds += s.collective_seconds;
    f.p2p_seconds += s.p2p_seconds;
    f.all_reduce_seconds += s.all_reduce_seconds;
    f.all_reduce_bytes += s.all_reduce_bytes;
    f.all_reduce_calls += static_cast<double>(s.all_reduce_calls);
  }
  f.steps = static_cast<double>(pipeline.steps);
  return f;
}

void report_weights(const Topology& t, const ModelWeights& w, const Checkpoint* ckpt, const LlamaConfig& config) {
  uint64_t mine[4] = {w.bytes_read, w.bytes_held, w.elements_unique, w.elements_replicated};
  std::vector<uint64_t> all(4 * static_cast<size_t>(t.world_size()));
  mpi_check(MPI_Gather(mine, 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Gather");
  if (t.rank() != 0) return;
  uint64_t unique = 0, replicated = 0;
  for (int r = 0; r < t.world_size(); ++r) {
    const uint64_t* v = all.data() + 4 * r;
    Topology peer(t.world_size(), r, t.tp_size(), t.pp_size(), t.n_layers(), {});
    std::ostringstream os;
    os << "rank " << r << " (tp " << peer.tp_rank() << ", pp " << peer.pp_rank() << ", layers ["
       << t.stage_layers(peer.pp_rank()).begin << ", " << t.stage_layers(peer.pp_rank()).end << ")): read "
       << mib(static_cast<double>(v[0])) << ", holds " << mib(static_cast<double>(v[1]));
    if (t.world_size() > 1) log::info(os.str());
    unique += v[2];
    replicated += v[3];
  }
  const uint64_t total = ckpt != nullptr ? ckpt->total_elements() : config.parameter_count();
  std::ostringstream os;
  os << "weights: " << (ckpt != nullptr ? "checkpoint " : "model (random) ") << total
     << " elements; held once over all ranks " << unique << (unique == total ? " (all of them)" : " (MISMATCH)")
     << ", plus " << replicated << " replicated (norms on every TP rank, shared kv heads, tied embedding on two stages)";
  log::info(os.str());
  TPLLAMA_CHECK(unique == total, "sharded load holds ", unique, " of ", total, " elements");
}

std::vector<RankFigures> report_run(const Topology& t, int n_nodes, const RankFigures& mine, const RunSummary* summary,
                                    const std::string& stats_path) {
  std::vector<RankFigures> all(static_cast<size_t>(t.world_size()));
  mpi_check(MPI_Gather(&mine, kFigureCount, MPI_DOUBLE, all.data(), kFigureCount, MPI_DOUBLE, 0, MPI_COMM_WORLD),
            "MPI_Gather");
  if (t.rank() != 0) return {};
  if (t.world_size() > 1)
    for (int r = 0; r < t.world_size(); ++r) {
      const RankFigures& f = all[static_cast<size_t>(r)];
      std::ostringstream os;
      os.setf(std::ios::fixed);
      os.precision(3);
      os << "rank " << r << ": compute " << f.compute_seconds << " s, waiting " << f.wait_seconds << " s (bubble "
         << 100 * bubble(f) << "%), collectives " << f.collective_seconds << " s, point-to-point " << f.p2p_seconds
         << " s, peak memory " << mib(f.peak_memory_bytes);
      log::info(os.str());
    }
  if (!stats_path.empty() && summary != nullptr) write_stats(stats_path, t, n_nodes, all, *summary);
  return all;
}

void write_trace(const Topology& t, const TraceRecorder& trace, const std::string& path) {
  std::vector<uint8_t> mine = trace.serialize();
  int size = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(t.world_size()));
  mpi_check(MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::vector<int> offsets(sizes.size(), 0);
  for (size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
  std::vector<uint8_t> all(t.rank() == 0 ? static_cast<size_t>(offsets.back() + sizes.back()) : 0);
  mpi_check(MPI_Gatherv(mine.data(), size, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0,
                        MPI_COMM_WORLD),
            "MPI_Gatherv");
  if (t.rank() != 0) return;
  std::vector<std::vector<uint8_t>> per_rank;
  std::vector<std::string> labels;
  for (int r = 0; r < t.world_size(); ++r) {
    const auto begin = all.begin() + offsets[static_cast<size_t>(r)];
    per_rank.emplace_back(begin, begin + sizes[static_cast<size_t>(r)]);
    Topology peer(t.world_size(), r, t.tp_size(), t.pp_size(), t.n_layers(), {});
    labels.push_back("rank " + std::to_string(r) + " (tp " + std::to_string(peer.tp_rank()) + ", pp " +
                     std::to_string(peer.pp_rank()) + ")");
  }
  write_text_file(path, TraceRecorder::to_chrome_json(per_rank, labels) + "\n", "--trace");
  log::info("trace written to " + path + " (open it in https://ui.perfetto.dev or chrome://tracing)");
}

}  // namespace tpllama
