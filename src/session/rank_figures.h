// One rank's figures for the end-of-run report (memory, weights, KV cache, the time split between
// computing and waiting, collectives), read from the parts that hold them. They cross the gather to
// rank 0 as plain doubles; app/run_report writes them.
#pragma once

namespace tpllama {

struct ModelWeights;
struct PipelineStats;
struct RankCommunicators;
class KvCache;

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

// This process's peak resident memory, its weights and cache, the pipeline's time split (none
// before it ran: null) and the sums over its three communicators.
RankFigures measure_rank_figures(const ModelWeights& weights, const KvCache& cache,
                                 const PipelineStats* pipeline, const RankCommunicators& comms);

}  // namespace tpllama
