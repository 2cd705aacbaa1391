// How many KV blocks a rank's pool holds, from plain numbers (no MPI, no model), and the checks
// that an explicit budget fits the free memory and that the pool holds a full-context sequence.
#pragma once

#include <cstdint>
#include <string>

namespace tpllama {

struct KvBudget {
  uint64_t bytes_per_block = 0;  // one block on this rank (its layers × its kv heads)
  uint64_t requested = 0;        // --kv-cache-memory; 0: 80% of free over sharers
  uint64_t free = 0;             // the device's free memory now (0: unknown)
  int sharers = 1;               // ranks sharing the device (and its free memory)
  int max_seqs = 64;
  int context = 0;  // tokens per sequence
  int block_size = 16;
};

// --kv-block-size's default: 16 positions on a GPU, 64 on a CPU (never more than the context),
// where decode attention reads a block's rows as one stretch of memory and the blocks of a long
// run lie scattered over the pool: 32 sequences of 2,048 positions, blocks shuffled, read their
// bf16 cache 1.2-1.3x faster (f32 1.13x) in blocks of 64 than of 16 (scripts/bench/attention.sh).
int default_kv_block_size(bool gpu, int context);
// The blocks this rank's budget holds, never more than max_seqs sequences at the full context
// take. The pool's count is the minimum of this over ranks.
long long kv_blocks_for(const KvBudget& budget);
// Fails when an explicit budget (budget.requested; `requested_text` as --kv-cache-memory gave it)
// makes n_blocks blocks that take more than this rank's share of the free memory; passes without a
// request or where the free memory is unknown.
void check_kv_fits_free_memory(const KvBudget& budget, long long n_blocks,
                               const std::string& requested_text, int rank);
// Fails when n_blocks blocks of block_size hold less than one `context`-token sequence, naming the
// flag that sets the context; `where` qualifies the count (" on the smallest rank").
void check_kv_holds_one_sequence(long long n_blocks, int block_size, int context,
                                 const std::string& where, const std::string& context_flag);

}  // namespace tpllama
