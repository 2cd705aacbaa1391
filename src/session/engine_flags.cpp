// The engine's flags resolved against the model, the layout and the ranks' memory.
#include "session/engine_flags.h"

#include <algorithm>
#include <climits>

#include "core/byte_size.h"
#include "core/error.h"
#include "model/step_batch.h"
#include "session/kv_budget.h"

namespace tpllama {

int resolve_context(const EngineFlags& flags, const LlamaConfig& config) {
  if (flags.max_model_len && *flags.max_model_len < 1)
    fail("--max-model-len must be at least 1, got ", *flags.max_model_len);
  if (flags.max_model_len && *flags.max_model_len > config.max_seq_len)
    fail("--max-model-len ", *flags.max_model_len, " exceeds the model's context of ",
         config.max_seq_len, " tokens (max_position_embeddings)");
  int context = flags.max_model_len.value_or(config.max_seq_len);
  if (flags.command_context && *flags.command_context > 0)
    context = std::min(context, *flags.command_context);
  return context;
}

EngineConfig resolve(const EngineFlags& flags, const LlamaConfig& config, const Topology& topology,
                     std::span<const RankMemory> memory) {
  if (flags.max_seqs < 1) fail("--max-seqs must be at least 1, got ", flags.max_seqs);
  if (flags.max_batch_tokens < 1)
    fail("--max-batch-tokens must be at least 1, got ", flags.max_batch_tokens);
  if (flags.kv_block_size && *flags.kv_block_size < 1)
    fail("--kv-block-size must be at least 1, got ", *flags.kv_block_size);
  TPLLAMA_CHECK(!memory.empty(), "no rank's memory to size the KV cache by");
  EngineConfig e;
  e.max_seqs = flags.max_seqs;
  e.max_batch_tokens = flags.max_batch_tokens;
  e.max_logit_rows = max_logit_rows(flags.max_seqs, flags.max_batch_tokens);
  e.groups = topology.pp_size();
  e.context = resolve_context(flags, config);
  e.prefix_caching = flags.prefix_caching;
  e.log_interval = flags.log_interval;
  e.grace_seconds = flags.grace_seconds;
  // Every rank one block size (rank 0's tables are in its blocks): the smallest default where the
  // ranks' devices differ.
  int block_size = INT_MAX;
  for (const RankMemory& m : memory)
    block_size = std::min(block_size, default_kv_block_size(m.gpu, e.context));
  e.kv_block_size = flags.kv_block_size.value_or(block_size);
  // Each rank's budget over its own bytes per block; the smallest pool is every rank's (rank 0
  // hands out block ids for all of them).
  const uint64_t requested =
      flags.kv_cache_memory.empty() ? 0 : parse_byte_size(flags.kv_cache_memory);
  long long blocks = LLONG_MAX;
  for (size_t rank = 0; rank < memory.size(); ++rank) {
    const RankMemory& m = memory[rank];
    const KvBudget budget{m.kv_bytes_per_position * static_cast<uint64_t>(e.kv_block_size),
                          requested,
                          m.free,
                          m.sharers,
                          e.max_seqs,
                          e.context,
                          e.kv_block_size};
    const long long mine = kv_blocks_for(budget);
    check_kv_fits_free_memory(budget, mine, flags.kv_cache_memory, static_cast<int>(rank));
    blocks = std::min(blocks, mine);
  }
  e.kv_blocks = static_cast<int>(std::min<long long>(blocks, INT32_MAX));
  check_kv_holds_one_sequence(e.kv_blocks, e.kv_block_size, e.context, " on the smallest rank",
                              flags.context_flag);
  return e;
}

}  // namespace tpllama
