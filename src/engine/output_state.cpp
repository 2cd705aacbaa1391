// A sequence's text, stops, logprobs, scores and record.
#include "engine/output_state.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/error.h"

namespace tpllama {
namespace {

// The earliest stop string that ends inside the text added since `from` (of two at one place, the
// first listed): its index in stops, and where it starts in text; stops.size() if none.
std::pair<size_t, size_t> find_stop(const std::string& text, size_t from,
                                    const std::vector<std::string>& stops) {
  std::pair<size_t, size_t> best{stops.size(), std::string::npos};
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    const size_t start = from >= s.size() ? from - s.size() + 1 : 0;
    const size_t at = text.find(s, start);
    if (at < best.second) best = {i, at};
  }
  return best;
}

bool holds(const std::vector<int32_t>& ids, int token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

// A token as logprobs show it: a control token by its piece, others by their bytes.
std::string token_text(const Tokenizer* tok, int id) {
  if (tok == nullptr || id < 0 || id >= tok->vocab_size()) return "";
  return tok->is_control(id) ? tok->piece(id) : token_display_text(tok->token_bytes(id));
}

// As logprobs show a token: its text, or "token_id:<id>" (vLLM's return_tokens_as_token_ids).
std::string shown_token(const Tokenizer* tok, const Request& request, int id) {
  return request.return_tokens_as_token_ids ? "token_id:" + std::to_string(id)
                                            : token_text(tok, id);
}

}  // namespace

std::vector<int32_t> stop_ids(const Request& r, const StopRules& rules) {
  std::vector<int32_t> ids;
  if (!r.ignore_eos) ids.assign(rules.eos_token_ids.begin(), rules.eos_token_ids.end());
  ids.insert(ids.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  return ids;
}

OutputState::OutputState(const Request& request, const Tokenizer* tokenizer,
                         std::span<const int32_t> prompt, Clock::time_point admitted)
    : request_(&request),
      tokenizer_(tokenizer),
      detok_(tokenizer, request_->skip_special_tokens),
      admitted_(admitted) {
  detok_.prime({prompt.begin(), prompt.end()});
  if (request.echo && request.prompt_tokens_cut > 0 && tokenizer != nullptr)
    echoed_prompt_ = tokenizer->decode({prompt.begin(), prompt.end()});  // what the model saw
}

OutputState OutputState::fork(std::span<const int32_t> prompt) const {
  OutputState child(*request_, tokenizer_, prompt, admitted_);
  child.score_ = score_;
  child.prompt_scores_ = prompt_scores_;
  return child;
}

bool OutputState::stop_at(int token, size_t before, const StopRules& rules) {
  const Request& r = *request_;
  const bool eos = !r.ignore_eos && holds(rules.eos_token_ids, token);
  if (eos || holds(r.stop_token_ids, token)) {
    if (!r.include_stop_str_in_output) text_.resize(before);
    if (!eos) stop_reason_ = token;
    return true;
  }
  const auto [which, at] = find_stop(text_, before, r.stop);
  if (which == r.stop.size()) return false;
  text_.resize(at + (r.include_stop_str_in_output ? r.stop[which].size() : 0));
  stop_reason_ = r.stop[which];
  return true;
}

FinishReason OutputState::take_token(const Sequence& s, const StopRules& rules) {
  const Request& r = *request_;
  const int token = s.tokens().back();
  const int generated = s.counts().generated;
  if (generated == 1) first_token_ = Clock::now();
  const size_t before = text_.size();
  if (tokenizer_ != nullptr && token < tokenizer_->vocab_size())
    text_ += detok_.push(token);  // else a padding id
  // vLLM's StopChecker: no stop before min_tokens (its stop ids are banned from the logits).
  if (generated >= r.logit_rules.min_tokens && stop_at(token, before, rules))
    return FinishReason::kStop;
  if (generated >= r.max_tokens || static_cast<int>(s.tokens().size()) >= rules.context) {
    flush();
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

void OutputState::flush() {
  text_ += detok_.flush();
}

void OutputState::record_logprobs(const RowLogprobs& row, int token) {
  TokenLogprob t;
  t.token = shown_token(tokenizer_, *request_, token);
  t.logprob = row.logprob;
  for (size_t j = 0; j < row.top_tokens.size(); ++j)
    t.top.emplace_back(shown_token(tokenizer_, *request_, row.top_tokens[j]), row.top_logprobs[j]);
  logprobs_.push_back(std::move(t));
}

void OutputState::score_token(const RowLogprobs& row, int target, int argmax_token) {
  ++score_.n_tokens;
  if (!request_->scoring) {  // a prompt position: the prompt's token first, then the top ones
    PositionLogprobs at = {{target, token_text(tokenizer_, target), row.logprob, row.rank}};
    for (size_t j = 0; j < row.top_tokens.size(); ++j)
      at.push_back({row.top_tokens[j], token_text(tokenizer_, row.top_tokens[j]),
                    row.top_logprobs[j], static_cast<int>(j) + 1});
    prompt_scores_.push_back(std::move(at));
    return;
  }
  score_.logprob += row.logprob;
  score_.is_greedy = score_.is_greedy && argmax_token == target;
  if (request_->logprobs >= 0) score_.token_logprobs.push_back(row.logprob);
}

std::string OutputState::prompt_text() const {
  const Request& r = *request_;
  if (r.prompt_tokens_cut > 0) return echoed_prompt_;
  if (!r.token_ids.empty() && tokenizer_ != nullptr)
    return tokenizer_->decode({r.token_ids.begin(), r.token_ids.end()});
  return r.prompt;
}

std::vector<TokenLogprob> OutputState::echoed_logprobs(int32_t first_token) {
  std::vector<TokenLogprob> all;
  TokenLogprob first;
  first.token = shown_token(tokenizer_, *request_, first_token);
  first.null = true;
  all.push_back(std::move(first));
  const auto top = static_cast<size_t>(request_->logprobs);
  for (const PositionLogprobs& at : prompt_scores_) {
    TokenLogprob t{shown_token(tokenizer_, *request_, at.front().token), at.front().logprob, {}};
    for (size_t j = 1; j < at.size() && j <= top; ++j)
      t.top.emplace_back(shown_token(tokenizer_, *request_, at[j].token), at[j].logprob);
    all.push_back(std::move(t));
  }
  all.insert(all.end(), std::make_move_iterator(logprobs_.begin()),
             std::make_move_iterator(logprobs_.end()));
  return all;
}

Result OutputState::take_result(const Sequence& s) {
  TPLLAMA_CHECK(s.state() == SequenceState::kFinished, "the record of a sequence not finished");
  const Request& r = *request_;
  Result result;
  result.id = r.id;
  result.chat = r.chat();
  result.text = r.echo ? prompt_text() + text_ : std::move(text_);
  result.prompt_tokens = s.counts().prompt;
  result.completion_tokens = s.counts().generated;
  result.finish_reason = finish_reason_name(s.finish_reason());
  result.stop_reason = stop_reason_;
  if (s.finish_reason() == FinishReason::kError) {
    result.error = error_;
    result.line = r.line;
  }
  if (r.logprobs >= 0 && !r.scoring)
    result.logprobs = r.echo ? echoed_logprobs(s.tokens().front()) : std::move(logprobs_);
  if (r.prompt_logprobs >= 0) {
    // The top ones the rows brought for echo too, cut to what prompt_logprobs asked for.
    const auto keep = static_cast<size_t>(r.prompt_logprobs) + 1;
    for (PositionLogprobs& at : prompt_scores_)
      if (at.size() > keep) at.resize(keep);
    result.prompt_logprobs = std::move(prompt_scores_);
  }
  if (r.scoring) result.score = std::move(score_);
  return result;
}

}  // namespace tpllama
