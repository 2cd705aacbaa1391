// A sequence's tokens, stop rules and record.
#include "runtime/sequence.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

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

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kScore:
      return "score";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

Sequence::Sequence(Request r, const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                   int context_tokens, uint64_t record_order, Clock::time_point admitted)
    : request(std::move(r)),
      order(record_order),
      n_prompt(static_cast<int>(prompt.size())),
      n_context(context_tokens),
      tokens_(std::move(prompt)),
      rng_(request.sampling.seed),
      admitted_(admitted),
      tokenizer_(tokenizer),
      detok_(tokenizer) {
  detok_.prime(tokens_);
}

int Sequence::scoring_rows(int from, int to) const {
  const int first = std::max(from, first_unscored()),
            last = std::min(to, static_cast<int>(tokens_.size()) - 1);
  return std::max(0, last - first);
}

void Sequence::assign_slot(int slot) {
  TPLLAMA_CHECK(state_ == SequenceState::kWaiting && slot_ < 0 && slot >= 0, "slot ", slot,
                " for a sequence in slot ", slot_);
  slot_ = slot;
}

void Sequence::skip_cached(int positions) {
  TPLLAMA_CHECK(
      n_computed_ == 0 && !in_flight() && !finished() && positions >= 0 && positions < pending(),
      "a prefix of ", positions, " cached positions for a sequence with ", n_computed_,
      " computed of ", tokens_.size());
  n_computed_ = positions;
}

void Sequence::start_step(int positions) {
  TPLLAMA_CHECK(!in_flight() && !finished() && positions > 0 && positions <= pending(),
                "a step of ", positions, " positions for a sequence with ", pending(), " pending");
  scheduled_ = positions;
  state_ = SequenceState::kInFlight;
}

void Sequence::end_step() {
  TPLLAMA_CHECK(in_flight(), "a step ended for a sequence not in flight");
  n_computed_ += scheduled_;
  scheduled_ = 0;
  state_ = SequenceState::kRunning;
}

void Sequence::preempt() {
  TPLLAMA_CHECK(!in_flight() && !finished(), "preemption of a sequence in flight or finished");
  n_computed_ = 0;
  state_ = SequenceState::kPreempted;
}

void Sequence::finish(FinishReason reason) {
  TPLLAMA_CHECK(!in_flight() && reason != FinishReason::kNone,
                "a sequence in flight cannot finish");
  finish_reason_ = reason;
  state_ = SequenceState::kFinished;
}

void Sequence::accept_token(int token, const StopRules& rules) {
  tokens_.push_back(token);
  if (n_generated_++ == 0) first_token_ = Clock::now();
  const auto& eos = rules.eos_token_ids;
  if (!request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    finish(FinishReason::kStop);
  } else {
    const size_t before = text_.size();
    if (tokenizer_ != nullptr && token < tokenizer_->vocab_size())
      text_ += detok_.push(token);  // else a padding id
    const size_t at = find_stop(text_, before, request.stop);
    if (at != std::string::npos) {
      text_.resize(at);
      finish(FinishReason::kStop);
    }
  }
  if (!finished() &&
      (n_generated_ >= request.max_tokens || static_cast<int>(tokens_.size()) >= rules.context)) {
    text_ += detok_.flush();
    finish(FinishReason::kLength);
  }
}

void Sequence::record_logprobs(const RowLogprobs& row, int token) {
  TokenLogprob t;
  t.token = token_text(tokenizer_, token);
  t.logprob = row.logprob;
  for (size_t j = 0; j < row.top_tokens.size(); ++j)
    t.top.emplace_back(token_text(tokenizer_, row.top_tokens[j]), row.top_logprobs[j]);
  logprobs_.push_back(std::move(t));
}

void Sequence::score_token(const RowLogprobs& row, int argmax_token) {
  const int target = tokens_[static_cast<size_t>(n_context + score_.n_tokens)];
  score_.logprob += row.logprob;
  score_.is_greedy = score_.is_greedy && argmax_token == target;
  if (request.logprobs >= 0) score_.token_logprobs.push_back(row.logprob);
  ++score_.n_tokens;
}

void Sequence::fail_non_finite(int position) {
  finish(FinishReason::kError);
  error_ = "the model's logits for this request are not finite (NaN or Inf) at position " +
           std::to_string(position) +
           ": its activations overflowed or its weights hold a NaN or Inf";
}

Result Sequence::take_result() {
  Result result;
  result.id = request.id;
  result.chat = request.chat();
  result.text = std::move(text_);
  result.prompt_tokens = n_prompt;
  result.completion_tokens = n_generated_;
  result.finish_reason = finish_reason_name(finish_reason_);
  if (finish_reason_ == FinishReason::kError) {
    result.error = error_;
    result.line = request.line;
  }
  if (request.logprobs >= 0 && !request.scoring) result.logprobs = std::move(logprobs_);
  if (request.scoring) result.score = std::move(score_);
  return result;
}

}  // namespace tpllama
