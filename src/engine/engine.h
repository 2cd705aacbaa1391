// Engine: rank 0's request loop over its parts — RequestIntake admits, Scheduler plans groups on
// the BlockAllocator's KV blocks for a StepExecutor (the pipeline), ResultPublisher writes each
// result as its request finishes — and the stop: admission ends, the running finish within the
// grace.
#pragma once

#include <cstddef>
#include <string>

#include "core/trace.h"
#include "engine/engine_config.h"
#include "engine/request_intake.h"
#include "engine/run_metrics.h"
#include "executor/step_executor.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "io/resume.h"
#include "model/config.h"
#include "model/model_text.h"

namespace tpllama {

// Where requests come from and results go.
struct EngineIo {
  RequestSource* reader = nullptr;
  // Instead of a reader: requests another rank's gate numbered and checked (a replica's leader).
  GatedSource* gated = nullptr;
  ResultSink* writer = nullptr;
  ResumeIndex* resume = nullptr;  // ids already in the output: skipped (the engine takes its map)
  bool progress = true;           // the progress line (off where another rank draws the job's)
  bool ordered = false;           // write in input order (bounded reorder buffer)
  size_t reorder_limit = 1024;    // results held back before admission pauses
  long long total_requests = 0;   // for progress; 0 when unknown
  std::string progress_unit =
      "requests";                  // what the progress line counts ("windows" for perplexity)
  bool terminal = false;           // stderr is a terminal
  TraceRecorder* trace = nullptr;  // the scheduler's spans (planning a group, applying tokens)
  // What a stopped run's user does next (the stop message says it), e.g. "resume with --resume".
  std::string how_to_continue = "resume with --resume";
};

class Engine {
 public:
  // text may be null when every request carries token ids (benchmarks); results then carry no
  // text and config.json's eos_token_id ends completions.
  Engine(const LlamaConfig& config, const ModelText* text, StepExecutor& executor,
         const EngineConfig& engine);
  // Runs every request of the reader; shuts the executor down at the end.
  RunSummary run(const EngineIo& io);

 private:
  const LlamaConfig& config_;
  const ModelText* text_;
  StepExecutor& executor_;
  const EngineConfig engine_;
};

}  // namespace tpllama
