// StepPlan: what rank 0 decides for one micro-batch group and every rank executes — KV slot
// changes, the tokens with their positions and slots, the rows to sample and how. Plans travel
// down the pipeline as byte messages, each ahead of its hidden states.
#pragma once

#include <cstdint>
#include <vector>

#include "model/step_batch.h"

namespace tpllama {

struct CacheOp {
  static constexpr int32_t kRelease = -1;
  int32_t slot = 0;
  int32_t block =
      kRelease;  // >= 0: append this block to the slot's table; kRelease: empty the table
  // >= 0: instead of appending, `block` takes the place of the table's block at this index, after
  // the KV of that block is copied into it (a shared block about to be written: copy on write).
  int32_t replaces = -1;
};

// What the last stage sends back to rank 0 for one group: a token per logit row, and the
// log-probabilities the rows asked for.
struct SampledRows : SampledTokens {
  int64_t group = 0;
};

// What a plan message tells the ranks. Its byte on the wire is the value.
enum class PlanKind : uint8_t {
  kStep = 0,      // run the step (its cache_ops, then its batch)
  kShutdown = 1,  // the end of the run: apply the cache_ops, hand it on, stop serving
  // No work: rank 0 waits for input that has not come (a quiet stream). Each rank counts it as a
  // step for --stall-timeout, so a wait for input is not taken for a hung rank.
  kKeepAlive = 2,
};

struct StepPlan {
  int64_t group = 0;
  PlanKind kind = PlanKind::kStep;
  std::vector<CacheOp> cache_ops;  // block table changes, applied in order before the step
  StepBatch batch;
  std::vector<RowSampling> sampling;  // one per batch.logit_rows entry
  std::vector<LogitEdit> edits;       // penalties, biases and bans of the rows (by row, then token)
  TokenMasks masks;                   // the rows a grammar restricts
};

std::vector<uint8_t> encode_sampled(const SampledRows& rows);
SampledRows decode_sampled(const std::vector<uint8_t>& bytes);

// A plan as bytes (its hidden states travel as a tensor message of their own).
std::vector<uint8_t> encode_plan(const StepPlan& plan);
// Decodes a whole message of encode_plan; bytes left over are an error.
StepPlan decode_plan(const std::vector<uint8_t>& bytes);

}  // namespace tpllama
