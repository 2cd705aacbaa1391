// A rank's figures, gathered from the weights, the cache, the pipeline and the communicators.
#include "session/rank_figures.h"

#include <sys/resource.h>

#include "executor/pipeline.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/group_comm.h"

namespace tpllama {

RankFigures measure_rank_figures(const ModelWeights& weights, const KvCache& cache,
                                 const PipelineStats* pipeline, const RankCommunicators& comms) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  RankFigures f;
  f.peak_memory_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
  f.weight_bytes = static_cast<double>(weights.bytes_held);
  f.matrix_bytes = static_cast<double>(weights.matrix_bytes);
  f.kv_cache_bytes = static_cast<double>(cache.bytes());
  f.kv_capacity_tokens = static_cast<double>(cache.n_blocks()) * cache.block_size();
  if (pipeline) {
    f.compute_seconds = pipeline->compute_seconds;
    f.wait_seconds = pipeline->wait_seconds;
    f.steps = static_cast<double>(pipeline->steps);
  }
  for (const Communicator* c : {comms.tp.get(), comms.stage.get(), comms.world.get()}) {
    const CommStats& s = c->stats();
    f.collective_seconds += s.collective_seconds;
    f.p2p_seconds += s.p2p_seconds;
    f.all_reduce_seconds += s.all_reduce_seconds;
    f.all_reduce_bytes += s.all_reduce_bytes;
    f.all_reduce_calls += static_cast<double>(s.all_reduce_calls);
  }
  return f;
}

}  // namespace tpllama
