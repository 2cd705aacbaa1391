// A sequence's LogitRules made the edits of its next logit row (model/step_batch.h's LogitEdit):
// logit_bias, the penalties over the tokens it holds, and min_tokens' bans of its stop ids. Rank 0
// builds them into each plan; every TP rank applies those of its own vocabulary slice.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/sampling_params.h"
#include "model/step_batch.h"

namespace tpllama {

// The token counts the penalties need: for each token of the prompt or the completion, how often
// the completion holds it and whether the prompt does. Kept only while a penalty is on.
class PenaltyCounts {
 public:
  PenaltyCounts(const LogitRules& rules, std::span<const int32_t> prompt);

  void add_generated(int32_t token);

  // Appends row `row`'s edits under `rules` (those given at construction), at most one per token,
  // by token: its bias, its penalties, and -inf on each of `banned` (min_tokens not reached).
  void append_edits(const LogitRules& rules, int32_t row, std::span<const int32_t> banned,
                    std::vector<LogitEdit>* out) const;

 private:
  struct Count {
    int32_t token = 0;
    int32_t generated = 0;
    bool in_prompt = false;
  };
  // By token: the edits come out in token order, with no sort per step.
  std::vector<Count> counts_;
  bool counting_ = false;
};

}  // namespace tpllama
