// What a run tells at start and at the end: the per-rank weight report, per-rank time split,
// the --stats JSON file and the --trace Chrome trace. The gathers here are collectives.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "model/checkpoint.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/topology.h"
#include "runtime/engine.h"
#include "runtime/pipeline.h"

namespace tpllama {

// One rank's figures for the end-of-run report.
struct RankFigures {
  double peak_memory_bytes = 0;
  double weight_bytes = 0;
  double matrix_bytes = 0;  // packed matrices: the weight bytes a decode step reads
  double kv_cache_bytes = 0;
  double kv_capacity_tokens = 0;
  double compute_seconds = 0;
  double wait_seconds = 0;
  double collective_seconds = 0;
  double p2p_seconds = 0;
  double all_reduce_seconds = 0;
  double all_reduce_bytes = 0;
  double all_reduce_calls = 0;
  double steps = 0;
};

// The JSON, indented, as the whole of the file a flag names; fails naming both when it cannot.
void write_json_file(const std::string& path, const nlohmann::json& j, const char* flag);
// p50 / p90 / p99 / mean / count of a latency histogram in seconds; null when it is empty.
nlohmann::json percentiles(const LatencyHistogram& h);

// comms: every communicator of the rank (TP group, stage group, world); their figures are summed.
RankFigures collect_rank_figures(const ModelWeights& weights, const KvCache& cache, const PipelineStats& pipeline,
                                 std::initializer_list<const Communicator*> comms);

// Every rank's read/held bytes on rank 0, and the check that every element is held once (against
// the checkpoint, or the config's parameter count for a synthetic model: ckpt null).
void report_weights(const Topology& t, const ModelWeights& w, const Checkpoint* ckpt, const LlamaConfig& config);

// Gathers the figures (collective); rank 0 logs them and, given a path, writes the stats JSON.
// Returns every rank's figures on rank 0 (empty elsewhere).
std::vector<RankFigures> report_run(const Topology& t, int n_nodes, const RankFigures& mine, const RunSummary* summary,
                const std::string& stats_path);

// Gathers every rank's trace events (collective) and writes them on rank 0.
void write_trace(const Topology& t, const TraceRecorder& trace, const std::string& path);

}  // namespace tpllama
