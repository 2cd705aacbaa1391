// Penalty counts and the logit edits of a row.
#include "engine/logit_edits.h"

#include <algorithm>
#include <cmath>

namespace tpllama {

PenaltyCounts::PenaltyCounts(const LogitRules& rules, std::span<const int32_t> prompt)
    : counting_(rules.penalizes()) {
  // Only the repetition penalty looks at the prompt.
  if (!counting_ || rules.repetition_penalty == 1.0) return;
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  for (int32_t t : tokens) counts_.push_back({t, 0, true});
}

void PenaltyCounts::add_generated(int32_t token) {
  if (!counting_) return;
  const auto at = std::lower_bound(counts_.begin(), counts_.end(), token,
                                   [](const Count& c, int32_t t) { return c.token < t; });
  if (at != counts_.end() && at->token == token)
    ++at->generated;
  else
    counts_.insert(at, {token, 1, false});
}

void PenaltyCounts::append_edits(const LogitRules& rules, int32_t row,
                                 std::span<const int32_t> banned,
                                 std::vector<LogitEdit>* out) const {
  const size_t first = out->size();
  const float scale = static_cast<float>(rules.repetition_penalty);
  for (const Count& c : counts_) {  // by token
    LogitEdit e{row, c.token, 0.0f, scale, 0.0f};
    if (c.generated > 0)
      e.subtract =
          static_cast<float>(rules.frequency_penalty * c.generated + rules.presence_penalty);
    if (e.scale != 1.0f || e.subtract != 0.0f) out->push_back(e);
  }
  if (rules.logit_bias.empty() && banned.empty()) return;  // one edit per token already
  // The bias (by token) and the few banned stop ids merged in: a token's bias, ban and penalties
  // are one cell's edit.
  const auto by_token = [](const LogitEdit& a, const LogitEdit& b) { return a.token < b.token; };
  const auto at = [&](size_t i) { return out->begin() + static_cast<std::ptrdiff_t>(i); };
  const size_t penalties_end = out->size();
  for (const auto& [token, bias] : rules.logit_bias) out->push_back({row, token, bias, 1.0f, 0.0f});
  const size_t bias_end = out->size();
  for (int32_t token : banned) out->push_back({row, token, -INFINITY, 1.0f, 0.0f});
  std::sort(at(bias_end), out->end(), by_token);
  std::inplace_merge(at(penalties_end), at(bias_end), out->end(), by_token);
  std::inplace_merge(at(first), at(penalties_end), out->end(), by_token);
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
