// StepPlan: what rank 0 decides for one micro-batch group and every rank executes — KV slot
// changes, the tokens with their positions and slots, the rows to sample and how. Plans travel
// down the pipeline as byte messages, each ahead of its hidden states.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/step_batch.h"

namespace tpllama {

struct CacheOp {
  static constexpr int32_t kRelease = -1;
  int32_t slot = 0;
  int32_t block = kRelease;  // >= 0: append this block to the slot's table; kRelease: empty the table
};

// What the last stage sends back to rank 0 for one group: a token per logit row, and the
// log-probabilities the rows asked for.
struct SampledRows : SampledTokens {
  int64_t group = 0;
};

struct StepPlan {
  int64_t group = 0;
  bool shutdown = false;
  // No work: rank 0 waits for input that has not come (a quiet stream). Each rank counts it as a
  // step for --stall-timeout, so a wait for input is not taken for a hung rank.
  bool keep_alive = false;
  std::vector<CacheOp> cache_ops;     // block table changes, applied in order before the step
  StepBatch batch;
  std::vector<RowSampling> sampling;  // one per batch.logit_rows entry
};

std::vector<uint8_t> encode_sampled(const SampledRows& rows);
SampledRows decode_sampled(const std::vector<uint8_t>& bytes);

// A plan as bytes (its hidden states travel as a tensor message of their own).
std::vector<uint8_t> encode_plan(const StepPlan& plan);
// Decodes a whole message of encode_plan; bytes left over are an error.
StepPlan decode_plan(const std::vector<uint8_t>& bytes);

// Where rank 0's plans go: the pipeline of ranks (Pipeline), or a test's stand-in.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Runs the plan, or hands it on. Returns its group's tokens at once when this rank also samples
  // them (a pipeline of one stage); otherwise they come from receive_tokens().
  virtual std::optional<SampledRows> submit(const StepPlan& plan) = 0;
  // The tokens of the oldest group in flight (groups return in submission order).
  virtual SampledRows receive_tokens(int64_t expected_group) = 0;
  // Once no group is in flight: the end of the run.
  virtual void shutdown() = 0;
  // While rank 0 waits for input with nothing in flight: every rank hears that it is alive.
  virtual void keep_alive() {}
};

}  // namespace tpllama
