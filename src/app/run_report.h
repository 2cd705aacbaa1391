// What a run tells at the end: per-rank figures and time split, the --stats JSON file, the --trace
// Chrome trace, and its last lines. The gathers here are collectives.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "engine/run_metrics.h"
#include "session/session.h"

namespace tpllama {

// p50 / p90 / p99 / mean / count of a latency histogram in seconds; null when it is empty.
nlohmann::json percentiles(const LatencyHistogram& h);

// After Session::serve (collective): every rank's figures on rank 0, which logs them and writes
// the stats JSON (given a path); every rank's trace events into the Chrome trace (given a path).
// Returns every rank's figures, by world rank, on rank 0 (empty elsewhere).
std::vector<RankFigures> report_run(const Session& session, const RunSummary& summary,
                                    const TraceRecorder& trace, const std::string& stats_path,
                                    const std::string& trace_path);

// Rank 0: a run's last lines — stopped early (and how to continue), or done (`done_note` ends that
// line; `warnings` follow it), every request failed, the KV capacity it had. Returns the exit
// status: 75 stopped early, 65 every request failed, else 0.
int finish_run(const Session& session, const RunSummary& summary, const Continuation& continuation,
               const std::string& done_note, const std::vector<std::string>& warnings = {});

}  // namespace tpllama
