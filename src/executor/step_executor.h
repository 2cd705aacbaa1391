// StepExecutor: where rank 0's step plans go — the pipeline of ranks (Pipeline), or a test's
// stand-in — apart from the plan's wire format (step_plan.h), which the executor need not use.
#pragma once

#include <cstdint>
#include <optional>

#include "executor/step_plan.h"

namespace tpllama {

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
