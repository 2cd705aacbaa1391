// A sequence's moves, and the logit rows it asks for.
#include "engine/sequence.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/sampling_params.h"

namespace tpllama {

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

Sequence::Sequence(std::shared_ptr<const Request> request, std::vector<int32_t> prompt,
                   int n_context, uint64_t order)
    : request_(std::move(request)), tokens_(std::move(prompt)), rng_(request_->sampling.seed) {
  counts_.order = order;
  counts_.prompt = static_cast<int>(tokens_.size());
  counts_.context = n_context;
  counts_.forks_left = request_->scoring ? 0 : request_->n - 1;
}

std::unique_ptr<Sequence> Sequence::fork(int index) {
  const Request& r = *request_;
  TPLLAMA_CHECK(index == r.n - counts_.forks_left && counts_.forks_left > 0 &&
                    counts_.computed >= counts_.prompt,
                "fork of sample ", index, " of ", r.n, " from sample ", counts_.sample, " with ",
                counts_.forks_left, " forks left and ", counts_.computed, " of ", counts_.prompt,
                " prompt positions computed");
  --counts_.forks_left;
  std::vector<int32_t> prompt(tokens_.begin(), tokens_.begin() + counts_.prompt);
  auto child =
      std::make_unique<Sequence>(request_, std::move(prompt), counts_.context, counts_.order);
  child->counts_.sample = index;
  child->counts_.forks_left = 0;
  child->counts_.computed = counts_.prompt;
  child->counts_.scored = counts_.scored;  // its prompt is scored: its rows are its own tokens'
  child->rng_ = Rng(sample_seed(r.sampling.seed, index));
  if (r.sampling.temperature > 0) child->rng_.uniform();  // first_uniform drew it
  return child;
}

void Sequence::assign_slot(int slot) {
  TPLLAMA_CHECK(state_ == SequenceState::kWaiting && counts_.slot < 0 && slot >= 0, "slot ", slot,
                " for a sequence in slot ", counts_.slot);
  counts_.slot = slot;
}

void Sequence::skip_cached(int positions) {
  TPLLAMA_CHECK(counts_.computed == 0 && state_ != SequenceState::kInFlight &&
                    state_ != SequenceState::kFinished && positions >= 0 && positions < pending(),
                "a prefix of ", positions, " cached positions for a sequence with ",
                counts_.computed, " computed of ", tokens_.size());
  counts_.computed = positions;
}

void Sequence::start_step(int positions) {
  TPLLAMA_CHECK(state_ != SequenceState::kInFlight && state_ != SequenceState::kFinished &&
                    positions > 0 && positions <= pending(),
                "a step of ", positions, " positions for a sequence with ", pending(), " pending");
  counts_.scheduled = positions;
  state_ = SequenceState::kInFlight;
}

void Sequence::end_step() {
  TPLLAMA_CHECK(state_ == SequenceState::kInFlight, "a step ended for a sequence not in flight");
  counts_.computed += counts_.scheduled;
  counts_.scheduled = 0;
  state_ = SequenceState::kRunning;
}

void Sequence::append_token(int token) {
  TPLLAMA_CHECK(counts_.computed == static_cast<int>(tokens_.size()),
                "a token for a sequence with ", pending(), " positions still to compute");
  tokens_.push_back(token);
  ++counts_.generated;
}

void Sequence::preempt() {
  TPLLAMA_CHECK(state_ != SequenceState::kInFlight && state_ != SequenceState::kFinished,
                "preemption of a sequence in flight or finished");
  counts_.computed = 0;
  state_ = SequenceState::kPreempted;
}

void Sequence::finish(FinishReason reason) {
  TPLLAMA_CHECK(state_ != SequenceState::kInFlight && reason != FinishReason::kNone,
                "a sequence in flight cannot finish");
  finish_reason_ = reason;
  state_ = SequenceState::kFinished;
}

double first_uniform(const Request& request, int index) {
  Rng stream(sample_seed(request.sampling.seed, index));
  return stream.uniform();
}

int prompt_top(const Request& r) {
  if (r.scoring) return -1;
  return std::max(r.prompt_logprobs, r.echo ? r.logprobs : -1);
}

bool scores(const Sequence& s) {
  return s.request().scoring || prompt_top(s.request()) >= 0;
}

int first_unscored(const Sequence& s) {
  return (s.request().scoring ? s.counts().context : 1) - 1 + s.counts().scored;
}

namespace {
// Positions [.., score_end - 1) are scored: the whole sequence of a scoring request, the prompt of
// another.
int score_end(const Sequence& s) {
  if (s.request().scoring) return static_cast<int>(s.tokens().size());
  return scores(s) ? s.counts().prompt : 0;
}
}  // namespace

bool scores_position(const Sequence& s, int p) {
  return scores(s) && p >= first_unscored(s) && p + 1 < score_end(s);
}

int scoring_rows(const Sequence& s, int from, int to) {
  if (!scores(s)) return 0;
  const int first = std::max(from, first_unscored(s)), last = std::min(to, score_end(s) - 1);
  return std::max(0, last - first);
}

int prompt_rows_left(const Sequence& s) {
  return s.request().scoring || !scores(s) ? 0 : std::max(0, score_end(s) - 1 - first_unscored(s));
}

}  // namespace tpllama
