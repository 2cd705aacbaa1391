// Engine: rank 0's request loop over its parts — RequestIntake admits, Scheduler plans groups on
// the BlockAllocator's KV blocks for a StepExecutor (the pipeline), ResultPublisher writes each
// result as its request finishes — and the stop: admission ends, the running finish within the
// grace.
#pragma once

#include <cstddef>
#include <string>

#include "core/trace.h"
#include "engine/run_metrics.h"
#include "executor/step_executor.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "io/resume.h"
#include "model/config.h"
#include "model/model_text.h"

namespace tpllama {

struct EngineOptions {
  int max_seqs = 64;            // sequences in flight at once (= KV cache slots)
  int max_batch_tokens = 2048;  // tokens per forward step (prefill is chunked to fit)
  double log_interval = 30.0;   // seconds between progress lines when stderr is not a terminal
  int groups = 1;               // micro-batch groups in flight (the pipeline depth)
  int context = 0;              // tokens per sequence, prompt + completion (0: the model's)
  int kv_block_size = 0;    // positions per KV block (0: default_kv_block_size's, set by Session)
  int kv_blocks = 0;        // blocks in every rank's pool
  int max_logit_rows = 64;  // logit rows per step (the model's buffer): decodes plus scored tokens
  bool prefix_caching =
      true;  // full KV blocks found again by their tokens and shared (BlockAllocator)
  double grace_seconds = 90;  // after a stop signal: how long in-flight requests may still run
  // What a stopped run's user does next (the stop message says it), e.g. "resume with --resume".
  std::string how_to_continue = "resume with --resume";
};

// Where requests come from and results go.
struct EngineIo {
  RequestSource* reader = nullptr;
  ResultSink* writer = nullptr;
  ResumeIndex* resume = nullptr;  // ids already in the output: skipped (the engine takes its map)
  bool ordered = false;           // write in input order (bounded reorder buffer)
  size_t reorder_limit = 1024;    // results held back before admission pauses
  long long total_requests = 0;   // for progress; 0 when unknown
  std::string progress_unit =
      "requests";                  // what the progress line counts ("windows" for perplexity)
  bool terminal = false;           // stderr is a terminal
  TraceRecorder* trace = nullptr;  // the scheduler's spans (planning a group, applying tokens)
};

class Engine {
 public:
  // text may be null when every request carries token ids (benchmarks); results then carry no
  // text and config.json's eos_token_id ends completions. Throws naming the flag when the options
  // cannot work (a KV cache too small for one full-context sequence).
  Engine(const LlamaConfig& config, const ModelText* text, StepExecutor& executor,
         EngineOptions options);
  // Runs every request of the reader; shuts the executor down at the end.
  RunSummary run(const EngineIo& io);

 private:
  const LlamaConfig& config_;
  const ModelText* text_;
  StepExecutor& executor_;
  EngineOptions options_;
};

}  // namespace tpllama
