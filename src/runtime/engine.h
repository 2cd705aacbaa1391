// Engine: rank 0's request loop. It admits requests from the prompt stream, packs prefill chunks
// and decode steps of many sequences into micro-batch groups (continuous batching on the paged KV
// cache), keeps up to `groups` of them in flight through the pipeline, applies the sampled tokens,
// checks stop conditions and writes each result as soon as its request finishes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "io/resume.h"
#include "model/config.h"
#include "runtime/pipeline.h"
#include "runtime/run_metrics.h"
#include "runtime/tokenizer.h"

namespace tpllama {

struct EngineOptions {
  int max_seqs = 64;            // sequences in flight at once (= KV cache slots)
  int max_batch_tokens = 2048;  // tokens per forward step (prefill is chunked to fit)
  double log_interval = 30.0;   // seconds between progress lines when stderr is not a terminal
  bool add_bos = true;          // prepend the config's bos_token_id to every prompt
  int groups = 1;               // micro-batch groups in flight (the pipeline depth)
  int context = 0;              // tokens per sequence, prompt + completion (0: the model's)
  int kv_block_size = 16;       // positions per KV block
  int kv_blocks = 0;            // blocks in every rank's pool
  int max_logit_rows = 64;      // logit rows per step (the model's buffer): decodes plus scored tokens
  double grace_seconds = 90;    // after a stop signal: how long in-flight requests may still run
};

// Where requests come from and results go.
struct EngineIo {
  RequestSource* reader = nullptr;
  ResultSink* writer = nullptr;
  ResumeIndex* resume = nullptr;  // ids already in the output: skipped (the engine takes its map)
  bool ordered = false;                 // write in input order (bounded reorder buffer)
  size_t reorder_limit = 1024;          // results held back before admission pauses
  long long total_requests = 0;         // for progress; 0 when unknown
  bool terminal = false;                // stderr is a terminal
};

struct RunSummary {
  long long requests = 0;  // records written
  long long finished_stop = 0;
  long long finished_length = 0;
  long long scored = 0;  // scoring requests answered
  long long errors = 0;
  long long prompt_tokens = 0;
  long long generated_tokens = 0;
  long long steps = 0;
  long long preemptions = 0;
  long long skipped = 0;  // already in the output (--resume)
  int stopped_by = 0;     // the signal that stopped the run early, or 0
  long long abandoned = 0;  // requests in flight when the grace period ended (redone by --resume)
  double seconds = 0;
  LatencyHistogram ttft;  // admission to first token, per finished request
  LatencyHistogram tpot;  // mean time per output token after the first
  std::string describe() const;
};

class Engine {
 public:
  Engine(const LlamaConfig& config, const Tokenizer& tokenizer, Pipeline& pipeline, EngineOptions options);
  // Runs every request of the reader; shuts the pipeline down at the end.
  RunSummary run(const EngineIo& io);

 private:
  const LlamaConfig& config_;
  const Tokenizer& tokenizer_;
  Pipeline& pipeline_;
  EngineOptions options_;
};

}  // namespace tpllama
