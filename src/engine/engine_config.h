// EngineConfig: what a replica's leader runs with, every value resolved (session/engine_flags.h's
// resolve: the user's flags, the model, the layout and the ranks' memory), none left for "not
// set". Made once per run and never changed.
#pragma once

namespace tpllama {

struct EngineConfig {
  int max_seqs = 64;            // sequences in flight at once (= KV cache slots)
  int max_batch_tokens = 2048;  // tokens per forward step (prefill is chunked to fit)
  int max_logit_rows = 64;  // logit rows per step (the model's buffer): decodes plus scored tokens
  int groups = 1;           // micro-batch groups in flight (the pipeline depth)
  int context = 0;          // tokens per sequence, prompt + completion
  int kv_block_size = 16;   // positions per KV block
  int kv_blocks = 0;        // blocks in every rank's pool
  bool prefix_caching = true;  // full KV blocks found again by their tokens and shared
  double log_interval = 30.0;  // seconds between progress lines when stderr is not a terminal
  double grace_seconds = 90;   // after a stop signal: how long in-flight requests may still run
};

}  // namespace tpllama
