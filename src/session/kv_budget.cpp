// The KV pool's block count from a byte budget, its ceiling of the free memory, and its floor of
// one full-context sequence.
#include "session/kv_budget.h"

#include <algorithm>
#include <cmath>

#include "core/byte_size.h"
#include "core/error.h"
#include "engine/block_pool.h"

namespace tpllama {

int default_kv_block_size(bool gpu, int context) {
  return std::clamp(context, 1, gpu ? 16 : 64);
}

long long kv_blocks_for(const KvBudget& b) {
  // An explicit budget is taken as given (checked against free memory apart); else a share of
  // what is free, left for the activations and the runtime's own.
  const uint64_t budget =
      b.requested > 0
          ? b.requested
          : static_cast<uint64_t>(0.8 * static_cast<double>(b.free) / std::max(1, b.sharers));
  const long long most =
      static_cast<long long>(b.max_seqs) * blocks_per_sequence(b.context, b.block_size);
  return std::min<long long>(
      most, static_cast<long long>(budget / std::max<uint64_t>(b.bytes_per_block, 1)));
}

void check_kv_fits_free_memory(const KvBudget& b, long long n_blocks,
                               const std::string& requested_text, int rank) {
  // An explicit budget is what the user asked for, but not past what the device has free now.
  const uint64_t wanted = static_cast<uint64_t>(n_blocks) * b.bytes_per_block;
  const uint64_t free = b.free / static_cast<uint64_t>(std::max(1, b.sharers));
  if (b.requested > 0 && free > 0 && wanted > free)
    fail("--kv-cache-memory ", requested_text, ": rank ", rank, " would hold a KV cache of ",
         mib(static_cast<double>(wanted)), " but has ", mib(static_cast<double>(free)),
         " of free memory left after the weights: give a smaller --kv-cache-memory, or leave it "
         "out to use 80% of what is free");
}

void check_kv_holds_one_sequence(long long n_blocks, int block_size, int context,
                                 const std::string& where, const std::string& context_flag) {
  const long long full = blocks_per_sequence(context, block_size);
  if (n_blocks < full)
    fail("the KV cache holds ", n_blocks, " blocks of ", block_size, " tokens", where,
         ", less than one ", context, "-token sequence needs (", full,
         "): give more --kv-cache-memory or a smaller ", context_flag);
}

}  // namespace tpllama
