// EngineFlags: the engine's settings as the user gave them (nullopt: not given), and resolve(),
// the one pure function that turns them, with the model, the layout and what every rank measured
// of its memory, into the EngineConfig the engine runs with. Every rank resolves the same numbers
// (the measurements are gathered to all), so their KV pools and block tables agree.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "engine/engine_config.h"
#include "model/config.h"
#include "parallel/topology.h"

namespace tpllama {

struct EngineFlags {
  int max_seqs = 64;                 // --max-seqs: sequences in flight at once
  int max_batch_tokens = 2048;       // --max-batch-tokens: tokens per forward step
  std::optional<int> kv_block_size;  // --kv-block-size; default_kv_block_size's
  std::optional<int> max_model_len;  // --max-model-len; max_position_embeddings
  std::string kv_cache_memory;       // --kv-cache-memory ("8GiB"); "": 80% of the free memory
  bool prefix_caching = true;        // --prefix-caching on|off
  double log_interval = 30.0;        // --log-interval
  double grace_seconds = 90;         // --grace-seconds
  // The context the command's requests need when below the model's (perplexity's window, bench's
  // lengths): the KV cache is sized for it, and a cache too small names `context_flag`.
  std::optional<int> command_context;
  std::string context_flag = "--max-model-len";
};

// What one rank measured that the KV pool depends on.
struct RankMemory {
  bool gpu = false;                    // it computes on a GPU (smaller default blocks)
  uint64_t kv_bytes_per_position = 0;  // its KV cache's bytes per position (its layers × kv heads)
  uint64_t free = 0;                   // its device's free memory after the weights (0: unknown)
  int sharers = 1;                     // ranks sharing its device (and its free memory)
};

// Tokens per sequence: the model's context, or less by --max-model-len or the command. Throws
// naming --max-model-len where it exceeds the model's.
int resolve_context(const EngineFlags& flags, const LlamaConfig& config);

// The engine's configuration. memory holds every rank's measurements, by rank. Throws naming the
// flag at fault: a setting below 1, a --max-model-len over the model's context, a
// --kv-cache-memory that is no size or more than a rank has free, a KV pool that holds no
// full-context sequence on the smallest rank.
EngineConfig resolve(const EngineFlags& flags, const LlamaConfig& config, const Topology& topology,
                     std::span<const RankMemory> memory);

}  // namespace tpllama
