// Engine: rank 0's request loop. It admits requests from the prompt stream, packs prefill chunks
// and decode steps of many sequences into each forward step (continuous batching), samples, checks
// stop conditions and writes each result as soon as its request finishes.
#pragma once

#include <cstdint>
#include <string>

#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "runtime/tokenizer.h"

namespace tpllama {

struct EngineOptions {
  int max_seqs = 64;           // sequences in flight at once
  int max_batch_tokens = 2048; // tokens per forward step (prefill is chunked to fit)
  double log_interval = 30.0;  // seconds between progress lines
  bool add_bos = true;         // prepend the config's bos_token_id to every prompt
};

struct RunSummary {
  long long requests = 0;
  long long finished_stop = 0;
  long long finished_length = 0;
  long long errors = 0;
  long long prompt_tokens = 0;
  long long generated_tokens = 0;
  long long steps = 0;
  double seconds = 0;
  std::string describe() const;
};

class Engine {
 public:
  Engine(LlamaModel& model, const Tokenizer& tokenizer, EngineOptions options);
  RunSummary run(PromptReader& reader, ResultWriter& writer);

 private:
  LlamaModel& model_;
  const Tokenizer& tokenizer_;
  EngineOptions options_;
  KvCache cache_;
};

}  // namespace tpllama
