// The report of `tpllama bench`: the run's setup, workload, throughput, latencies, roofline and
// ranks as one JSON object (--json), and the same figures as a table on stdout.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "app/bench_limits.h"
#include "app/bench_workload.h"
#include "app/commands.h"
#include "model/llama_model.h"
#include "session/rank_figures.h"
#include "session/session.h"

namespace tpllama {

// What a bench run gives its report.
struct BenchRun {
  const Session& session;
  const RunSummary& summary;
  const std::vector<RankFigures>& figures;  // every rank's, on rank 0
  const MachineLimits& limits;
  const SyntheticSource& source;
  LengthRange in, out;
};

// The report (one object: the parts' keys are distinct).
nlohmann::json make_report(const BenchOptions& o, const BenchRun& run);
// Rank 0's forward op by op, the costliest first: seconds, share of the forward, calls, and the
// FLOP rate of its matrix products; then its GEMMs together, against rank_peak (a rank's share of
// the machine's GEMM peak; 0: not measured).
nlohmann::json op_split_json(const OpSplit::Phase& split, double rank_peak);
// The report as a table on stdout.
void print_report(const nlohmann::json& j);

}  // namespace tpllama
