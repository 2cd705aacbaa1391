// A sequence's tokens, stop rules and record.
#include "runtime/sequence.h"

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
      forks_left_(request.scoring ? 0 : request.n - 1),
      rng_(request.sampling.seed),
      penalties_(request.logit_rules, tokens_),
      admitted_(admitted),
      tokenizer_(tokenizer),
      detok_(tokenizer, request.skip_special_tokens) {
  detok_.prime(tokens_);
}

int Sequence::prompt_top() const {
  if (request.scoring) return -1;
  return std::max(request.prompt_logprobs, request.echo ? request.logprobs : -1);
}

int Sequence::scoring_rows(int from, int to) const {
  if (!scores()) return 0;
  const int first = std::max(from, first_unscored()), last = std::min(to, score_end() - 1);
  return std::max(0, last - first);
}

double Sequence::fork_uniform(int index) const {
  Rng stream(sample_seed(request.sampling.seed, index));
  return stream.uniform();
}

std::unique_ptr<Sequence> Sequence::fork(int index) {
  TPLLAMA_CHECK(index == request.n - forks_left_ && forks_left_ > 0 && n_computed_ >= n_prompt,
                "fork of sample ", index, " of ", request.n, " from sample ", sample_index_,
                " with ", forks_left_, " forks left and ", n_computed_, " of ", n_prompt,
                " prompt positions computed");
  --forks_left_;
  std::vector<int32_t> prompt(tokens_.begin(), tokens_.begin() + n_prompt);
  auto child = std::make_unique<Sequence>(request, tokenizer_, std::move(prompt), n_context, order,
                                          admitted_);
  child->sample_index_ = index;
  child->forks_left_ = 0;
  child->rng_ = Rng(sample_seed(request.sampling.seed, index));
  if (request.sampling.temperature > 0) child->rng_.uniform();  // fork_uniform drew it
  child->n_computed_ = n_prompt;
  child->score_ = score_;  // its prompt is scored: its rows are its own tokens'
  child->prompt_scores_ = prompt_scores_;
  if (grammar_) {  // from the grammar's start, as this one was when its rows were drawn
    child->grammar_ = grammar_;
    child->matcher_.emplace(grammar_->grammar());
    child->next_mask_ = grammar_->mask(*child->matcher_);
  }
  return child;
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

std::vector<int32_t> Sequence::stop_ids(const StopRules& rules) const {
  std::vector<int32_t> ids;
  if (!request.ignore_eos) ids.assign(rules.eos_token_ids.begin(), rules.eos_token_ids.end());
  ids.insert(ids.end(), request.stop_token_ids.begin(), request.stop_token_ids.end());
  return ids;
}

void Sequence::append_logit_edits(int32_t row, const StopRules& rules,
                                  std::vector<LogitEdit>* out) const {
  const LogitRules& r = request.logit_rules;
  const std::vector<int32_t> banned =
      n_generated_ < r.min_tokens ? stop_ids(rules) : std::vector<int32_t>{};
  penalties_.append_edits(r, row, banned, out);
}

bool Sequence::stop_at(int token, size_t before, const StopRules& rules) {
  const bool eos = !request.ignore_eos && holds(rules.eos_token_ids, token);
  if (eos || holds(request.stop_token_ids, token)) {
    if (!request.include_stop_str_in_output) text_.resize(before);
    if (!eos) stop_reason_ = token;
    return true;
  }
  const auto [which, at] = find_stop(text_, before, request.stop);
  if (which == request.stop.size()) return false;
  text_.resize(at + (request.include_stop_str_in_output ? request.stop[which].size() : 0));
  stop_reason_ = request.stop[which];
  return true;
}

namespace {
// Whether the mask allows a token that is not one of `stops` (a stop_token_ids entry may be a
// text token, and a row must never be left with only stop ids that min_tokens bans).
bool allows_text(const grammar::TokenMask& mask, const std::vector<int32_t>& stops) {
  for (size_t w = 0; w < mask.size(); ++w) {
    uint32_t word = mask[w];
    if (word == 0) continue;
    for (const int32_t id : stops)
      if (static_cast<size_t>(id) >> 5 == w) word &= ~(uint32_t{1} << (id & 31));
    if (word != 0) return true;
  }
  return false;
}
}  // namespace

void Sequence::constrain(std::shared_ptr<const OutputGrammar> grammar, const StopRules& rules) {
  TPLLAMA_CHECK(n_generated_ == 0 && !request.scoring, "a grammar for a sequence under way");
  grammar_ = std::move(grammar);
  matcher_.emplace(grammar_->grammar());
  next_mask_ = grammar_->mask(*matcher_);
  if (allows_text(*next_mask_, stop_ids(rules))) return;
  if (matcher_->can_end()) fail("the grammar matches only an empty completion");
  fail("the grammar allows no token of the model's vocabulary at its start");
}

void Sequence::append_token_mask(int32_t row, const StopRules& rules, TokenMasks* out) const {
  TPLLAMA_CHECK(next_mask_ != nullptr, "a token mask for a sequence without a grammar");
  const grammar::TokenMask& mask = *next_mask_;
  if (out->width == 0) out->width = static_cast<int32_t>(mask.size());
  TPLLAMA_CHECK(static_cast<size_t>(out->width) == mask.size(), "masks of ", out->width, " and ",
                mask.size(), " words in one step");
  out->rows.push_back(row);
  const size_t at = out->words.size();
  out->words.insert(out->words.end(), mask.begin(), mask.end());
  // The stop ids where the grammar may end, and nowhere else (a stop_token_ids entry that is a text
  // token would otherwise cut the text where its bytes fit but the grammar cannot end).
  const bool may_end = matcher_->can_end();
  for (const int32_t id : stop_ids(rules))
    if (static_cast<size_t>(id) < 32 * mask.size()) {
      uint32_t& word = out->words[at + (static_cast<size_t>(id) >> 5)];
      const uint32_t bit = uint32_t{1} << (id & 31);
      word = may_end ? word | bit : word & ~bit;
    }
}

void Sequence::fail_grammar(const std::string& why) {
  finish(FinishReason::kError);
  error_ = "structured output failed after " + std::to_string(n_generated_) +
           " generated tokens: " + why;
}

bool Sequence::advance_grammar(int token, const StopRules& rules) {
  try {
    const std::vector<int32_t> stops = stop_ids(rules);
    if (!holds(stops, token)) {
      const std::string bytes = tokenizer_ != nullptr && token < tokenizer_->vocab_size()
                                    ? tokenizer_->token_bytes(token)
                                    : std::string();
      if (bytes.empty() || !matcher_->advance(bytes)) {
        fail_grammar("token " + std::to_string(token) + " is not one its grammar allows here");
        return false;
      }
    }
  } catch (const Error& e) {  // the grammar is too ambiguous here
    fail_grammar(e.what());
    return false;
  }
  if (!matcher_->can_continue()) return false;  // the grammar is complete: nothing may follow
  next_mask_.reset();
  mask_due_ = true;
  return true;
}

bool Sequence::mask_memoized() {
  if (!mask_due_ || next_mask_) return true;
  next_mask_ = grammar_->memoized(*matcher_);
  return next_mask_ != nullptr;
}

void Sequence::compute_mask() {
  if (!mask_due_ || next_mask_ || !mask_error_.empty()) return;
  try {  // on a worker thread: nothing may escape
    next_mask_ = grammar_->mask(*matcher_);
  } catch (const std::bad_alloc&) {
    mask_error_ = "out of memory making its token mask";
  } catch (const std::exception& e) {  // too ambiguous: settle_mask fails it
    mask_error_ = e.what();
  } catch (...) {
    mask_error_ = "an unknown error making its token mask";
  }
}

void Sequence::settle_mask(const StopRules& rules) {
  if (!mask_due_) return;
  compute_mask();
  mask_due_ = false;
  if (!mask_error_.empty()) return fail_grammar(mask_error_);
  if (allows_text(*next_mask_, stop_ids(rules))) return;
  if (!matcher_->can_end())
    return fail_grammar("no token of the model's vocabulary continues its grammar here");
  text_ += detok_.flush();
  finish(FinishReason::kStop);  // only a stop may follow: it stops now
}

void Sequence::accept_token(int token, const StopRules& rules, bool defer_mask) {
  tokens_.push_back(token);
  penalties_.add_generated(token);
  if (n_generated_++ == 0) first_token_ = Clock::now();
  const size_t before = text_.size();
  if (tokenizer_ != nullptr && token < tokenizer_->vocab_size())
    text_ += detok_.push(token);  // else a padding id
  // vLLM's StopChecker: no stop before min_tokens (its stop ids are banned from the logits).
  if (n_generated_ >= request.logit_rules.min_tokens && stop_at(token, before, rules))
    finish(FinishReason::kStop);
  if (!finished() &&
      (n_generated_ >= request.max_tokens || static_cast<int>(tokens_.size()) >= rules.context)) {
    text_ += detok_.flush();
    finish(FinishReason::kLength);
  }
  if (!finished() && grammar_ && !advance_grammar(token, rules) && !finished()) {
    text_ += detok_.flush();
    finish(FinishReason::kStop);  // its grammar is complete
  }
  if (!defer_mask) settle_mask(rules);
}

void Sequence::record_logprobs(const RowLogprobs& row, int token) {
  TokenLogprob t;
  t.token = shown_token(tokenizer_, request, token);
  t.logprob = row.logprob;
  for (size_t j = 0; j < row.top_tokens.size(); ++j)
    t.top.emplace_back(shown_token(tokenizer_, request, row.top_tokens[j]), row.top_logprobs[j]);
  logprobs_.push_back(std::move(t));
}

void Sequence::score_token(const RowLogprobs& row, int argmax_token) {
  const int target = tokens_[static_cast<size_t>(first_unscored() + 1)];
  ++score_.n_tokens;
  if (!request.scoring) {  // a prompt position: the prompt's token first, then the top ones
    PositionLogprobs at = {{target, token_text(tokenizer_, target), row.logprob, row.rank}};
    for (size_t j = 0; j < row.top_tokens.size(); ++j)
      at.push_back({row.top_tokens[j], token_text(tokenizer_, row.top_tokens[j]),
                    row.top_logprobs[j], static_cast<int>(j) + 1});
    prompt_scores_.push_back(std::move(at));
    return;
  }
  score_.logprob += row.logprob;
  score_.is_greedy = score_.is_greedy && argmax_token == target;
  if (request.logprobs >= 0) score_.token_logprobs.push_back(row.logprob);
}

void Sequence::fail_non_finite(int position) {
  finish(FinishReason::kError);
  error_ = "the model's logits for this request are not finite (NaN or Inf) at position " +
           std::to_string(position) +
           ": its activations overflowed or its weights hold a NaN or Inf";
}

std::string Sequence::prompt_text() const {
  if (!request.token_ids.empty() && tokenizer_ != nullptr)
    return tokenizer_->decode({request.token_ids.begin(), request.token_ids.end()});
  return request.prompt;
}

std::vector<TokenLogprob> Sequence::echoed_logprobs() {
  std::vector<TokenLogprob> all;
  TokenLogprob first;
  first.token = shown_token(tokenizer_, request, tokens_.front());
  first.null = true;
  all.push_back(std::move(first));
  const auto top = static_cast<size_t>(request.logprobs);
  for (const PositionLogprobs& at : prompt_scores_) {
    TokenLogprob t{shown_token(tokenizer_, request, at.front().token), at.front().logprob, {}};
    for (size_t j = 1; j < at.size() && j <= top; ++j)
      t.top.emplace_back(shown_token(tokenizer_, request, at[j].token), at[j].logprob);
    all.push_back(std::move(t));
  }
  all.insert(all.end(), std::make_move_iterator(logprobs_.begin()),
             std::make_move_iterator(logprobs_.end()));
  return all;
}

Result Sequence::take_result() {
  Result result;
  result.id = request.id;
  result.chat = request.chat();
  result.text = request.echo ? prompt_text() + text_ : std::move(text_);
  result.prompt_tokens = n_prompt;
  result.completion_tokens = n_generated_;
  result.finish_reason = finish_reason_name(finish_reason_);
  result.stop_reason = stop_reason_;
  if (finish_reason_ == FinishReason::kError) {
    result.error = error_;
    result.line = request.line;
  }
  if (request.logprobs >= 0 && !request.scoring)
    result.logprobs = request.echo ? echoed_logprobs() : std::move(logprobs_);
  if (request.prompt_logprobs >= 0) {
    // The top ones the rows brought for echo too, cut to what prompt_logprobs asked for.
    const auto keep = static_cast<size_t>(request.prompt_logprobs) + 1;
    for (PositionLogprobs& at : prompt_scores_)
      if (at.size() > keep) at.resize(keep);
    result.prompt_logprobs = std::move(prompt_scores_);
  }
  if (request.scoring) result.score = std::move(score_);
  return result;
}

}  // namespace tpllama
