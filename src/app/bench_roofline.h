// The roofline of a bench run: what it computed and read, estimated from the model's shape, per
// second and as fractions of the machine's measured limits.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "app/bench_limits.h"
#include "app/bench_workload.h"
#include "engine/run_metrics.h"
#include "session/rank_figures.h"
#include "session/session.h"

namespace tpllama {

// What the run computed and read, estimated from the model's shape: the roofline's side of the
// report.
struct WorkEstimate {
  double decode_bytes = 0;   // weights and KV the pure-decode steps read
  double prefill_flop = 0;   // FLOPs of the prompt tokens the prefill steps computed
  double prompt_tokens = 0;  // of the workload's prompts
};

// The work of the run: decode's bytes from its steps and the context they read, prefill's FLOPs
// from the workload's prompts (scaled to the prompt tokens the prefill steps computed).
WorkEstimate estimate_work(const Session& session, const RunSummary& s,
                           const std::vector<RankFigures>& figures, const SyntheticSource& source);

// A JSON number, or null when there is nothing to measure it by (a rate over no time, a fraction of
// an unmeasured limit): the table then shows "-", never a made-up 0.
nlohmann::json ratio(double amount, double over);

// The bytes decode read and the FLOPs prefill computed, per second and as fractions of the
// machine's measured limits (null where there is nothing to measure them by).
nlohmann::json roofline_json(const RunSummary& s, const WorkEstimate& work,
                             const MachineLimits& limits);

}  // namespace tpllama
