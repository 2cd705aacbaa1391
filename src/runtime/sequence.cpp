// A sequence's tokens, stop rules and record.
#include "runtime/sequence.h"

#include <algorithm>
#include <utility>

namespace tpllama {
namespace {

// Finds the earliest stop string that ends inside the text added since `from`.
size_t find_stop(const std::string& text, size_t from, const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    size_t start = from >= s.size() ? from - s.size() + 1 : 0;
    size_t at = text.find(s, start);
    if (at != std::string::npos) best = std::min(best, at);
  }
  return best;
}

// A token as logprobs show it: a control token by its piece, others by their bytes.
std::string token_text(const Tokenizer* tok, int id) {
  if (tok == nullptr || id < 0 || id >= tok->vocab_size()) return "";
  return tok->is_control(id) ? tok->piece(id) : token_display_text(tok->token_bytes(id));
}

}  // namespace

Sequence::Sequence(Request r, const Tokenizer* tokenizer, std::vector<int32_t> prompt, int context_tokens,
                   uint64_t record_order)
    : request(std::move(r)),
      order(record_order),
      tokens(std::move(prompt)),
      n_prompt(static_cast<int>(tokens.size())),
      n_context(context_tokens),
      rng(request.sampling.seed),
      tokenizer_(tokenizer),
      detok_(tokenizer) {
  detok_.prime(tokens);
}

int Sequence::scoring_rows(int from, int to) const {
  const int first = std::max(from, first_unscored()), last = std::min(to, static_cast<int>(tokens.size()) - 1);
  return std::max(0, last - first);
}

void Sequence::accept_token(int token, const StopRules& rules) {
  tokens.push_back(token);
  if (n_generated++ == 0) first_token = Clock::now();
  const auto& eos = rules.eos_token_ids;
  if (!request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    finish_reason = "stop";
  } else {
    const size_t before = text.size();
    if (tokenizer_ != nullptr && token < tokenizer_->vocab_size()) text += detok_.push(token);  // else a padding id
    const size_t at = find_stop(text, before, request.stop);
    if (at != std::string::npos) {
      text.resize(at);
      finish_reason = "stop";
    }
  }
  if (finish_reason.empty() && (n_generated >= request.max_tokens || static_cast<int>(tokens.size()) >= rules.context)) {
    text += detok_.flush();
    finish_reason = "length";
  }
}

void Sequence::record_logprobs(const RowLogprobs& row, int token) {
  TokenLogprob t;
  t.token = token_text(tokenizer_, token);
  t.logprob = row.logprob;
  for (size_t j = 0; j < row.top_tokens.size(); ++j)
    t.top.emplace_back(token_text(tokenizer_, row.top_tokens[j]), row.top_logprobs[j]);
  logprobs.push_back(std::move(t));
}

void Sequence::score_token(const RowLogprobs& row, int argmax_token) {
  const int target = tokens[static_cast<size_t>(n_context + score.n_tokens)];
  score.logprob += row.logprob;
  score.is_greedy = score.is_greedy && argmax_token == target;
  if (request.logprobs >= 0) score.token_logprobs.push_back(row.logprob);
  ++score.n_tokens;
}

void Sequence::fail_non_finite(int position) {
  finish_reason = "error";
  error = "the model's logits for this request are not finite (NaN or Inf) at position " + std::to_string(position) +
          ": its activations overflowed or its weights hold a NaN or Inf";
}

Result Sequence::take_result() {
  Result result;
  result.id = request.id;
  result.chat = request.chat();
  result.text = std::move(text);
  result.prompt_tokens = n_prompt;
  result.completion_tokens = n_generated;
  result.finish_reason = finish_reason;
  if (finish_reason == "error") {
    result.error = error;
    result.line = request.line;
  }
  if (request.logprobs >= 0 && !request.scoring) result.logprobs = std::move(logprobs);
  if (request.scoring) result.score = std::move(score);
  return result;
}

}  // namespace tpllama
