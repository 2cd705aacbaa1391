// Request and Result helpers that do not belong to one reader or writer.
#include "io/request.h"

#include <utility>

namespace tpllama {

std::string id_key(const nlohmann::json& id) {
  return id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_line_key(size_t line) {
  return "line:" + std::to_string(line);
}

Result join_samples(std::vector<Result> samples) {
  Result joined;
  if (samples.empty()) return joined;
  const Result& first = samples.front();
  joined.id = first.id;
  joined.chat = first.chat;
  joined.prompt_tokens = first.prompt_tokens;
  joined.finish_reason = first.finish_reason;
  for (size_t k = 0; k < samples.size(); ++k) {
    Result& s = samples[k];
    joined.completion_tokens += s.completion_tokens;
    if (!s.error.empty() && joined.error.empty()) {  // the first failure speaks for the request
      joined.finish_reason = s.finish_reason;
      joined.error = "sample " + std::to_string(k) + ": " + s.error;
      joined.line = s.line;
    }
    joined.choices.push_back({static_cast<int>(k), std::move(s.text), s.completion_tokens,
                              std::move(s.finish_reason), std::move(s.stop_reason),
                              std::move(s.logprobs), std::move(s.prompt_logprobs)});
  }
  if (!joined.error.empty()) joined.choices.clear();
  return joined;
}

}  // namespace tpllama
