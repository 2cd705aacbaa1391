// Penalty counts and the logit edits of a row.
#include "runtime/logit_edits.h"

#include <algorithm>
#include <cmath>

namespace tpllama {

PenaltyCounts::PenaltyCounts(const LogitRules& rules, std::span<const int32_t> prompt)
    : counting_(rules.penalizes()) {
  // Only the repetition penalty looks at the prompt.
  if (!counting_ || rules.repetition_penalty == 1.0) return;
  for (int32_t t : prompt) counts_[t].in_prompt = true;
}

void PenaltyCounts::add_generated(int32_t token) {
  if (counting_) ++counts_[token].generated;
}

void PenaltyCounts::append_edits(const LogitRules& rules, int32_t row,
                                 std::span<const int32_t> banned,
                                 std::vector<LogitEdit>* out) const {
  const size_t first = out->size();
  const float scale = static_cast<float>(rules.repetition_penalty);
  for (const auto& [token, count] : counts_) {
    LogitEdit e{row, token, 0.0f, scale, 0.0f};
    if (count.generated > 0)
      e.subtract =
          static_cast<float>(rules.frequency_penalty * count.generated + rules.presence_penalty);
    if (e.scale != 1.0f || e.subtract != 0.0f) out->push_back(e);
  }
  for (const auto& [token, bias] : rules.logit_bias) out->push_back({row, token, bias, 1.0f, 0.0f});
  for (int32_t token : banned) out->push_back({row, token, -INFINITY, 1.0f, 0.0f});
  // One edit per token: a token's bias, ban and penalties are one cell's edit.
  const auto by_token = [](const LogitEdit& a, const LogitEdit& b) { return a.token < b.token; };
  std::sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(), by_token);
  size_t kept = first;
  for (size_t i = first; i < out->size(); ++i) {
    const LogitEdit& e = (*out)[i];
    if (kept > first && (*out)[kept - 1].token == e.token) {
      LogitEdit& merged = (*out)[kept - 1];
      merged.bias += e.bias;
      merged.scale = merged.scale != 1.0f ? merged.scale : e.scale;
      merged.subtract += e.subtract;
    } else {
      (*out)[kept++] = e;
    }
  }
  out->resize(kept);
}

}  // namespace tpllama
