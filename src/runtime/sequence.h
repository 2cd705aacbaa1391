// Sequence: one request's state on rank 0 while it runs — where it stands (SequenceState), its
// tokens (prompt, then generated), how many of them the KV cache holds, its random stream and
// detokenizer, its text or score — and the rules that finish it: stop ids, stop strings,
// max_tokens, the context.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "grammar/matcher.h"
#include "io/request.h"
#include "model/step_batch.h"
#include "runtime/logit_edits.h"
#include "runtime/output_grammar.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace tpllama {

// What ends a generation besides the request's own max_tokens and stop strings.
struct StopRules {
  std::vector<int> eos_token_ids;  // FinishReason::kStop, unless the request ignores EOS
  int context = 0;                 // tokens per sequence, prompt + completion: kLength
};

// Where a sequence stands. Only the Scheduler moves it (as vLLM v1's RequestStatus): it admits
// (kWaiting), puts it in a group (kInFlight), applies the group's tokens (kRunning, or kFinished),
// and takes its blocks back when an older sequence needs them (kPreempted).
//
//   kWaiting ─► kInFlight ─► kRunning ─► kInFlight ─► ...
//                               └─► kFinished
//   any state but kInFlight and kFinished ─► kPreempted ─► kInFlight
enum class SequenceState {
  kWaiting,    // admitted with a slot; no step planned yet
  kInFlight,   // in a group in flight: `scheduled` of its positions are being computed
  kRunning,    // between steps: holds its KV blocks, not in flight
  kPreempted,  // its blocks were taken back: every position is computed again
  kFinished,   // has its finish_reason; the engine retires it
};

// Why a sequence ended; the record spells it as finish_reason_name says.
enum class FinishReason {
  kNone,    // not finished
  kStop,    // a stop id or a stop string: "stop"
  kLength,  // max_tokens or the context: "length"
  kScore,   // a scoring request scored its whole continuation: "score"
  kError,   // its logits were not finite: "error"
};

// The output record's finish_reason ("" for kNone).
const char* finish_reason_name(FinishReason reason);

// The samples of a request of n > 1 are n Sequences. The first is admitted as any other; the logit
// row of its last prompt position is asked for n times (one draw from each sample's own stream),
// and when that step comes back the Scheduler forks the other n − 1 from it (Sequence::fork): each
// its own slot, whose table holds the first sample's blocks by reference (the BlockAllocator's
// counts; the shared partial last block is copied by whichever writes it first), its prompt
// computed, its first token drawn, and the same states from then on. The prompt is computed once.
class Sequence {
 public:
  // tokens: the request's prompt as the model is given it; n_context: of those, the scoring
  // request's context (BOS included). tokenizer may be null (token-id requests: no text).
  // admitted: when its request was read (the start of its time to first token).
  Sequence(Request r, const Tokenizer* tokenizer, std::vector<int32_t> tokens, int n_context,
           uint64_t order, Clock::time_point admitted = Clock::now());

  SequenceState state() const { return state_; }
  bool in_flight() const { return state_ == SequenceState::kInFlight; }
  bool finished() const { return state_ == SequenceState::kFinished; }
  FinishReason finish_reason() const { return finish_reason_; }
  bool decoding() const { return n_computed_ >= n_prompt; }
  // Positions still to compute: the rest of the prompt, or the last sampled token.
  int pending() const { return static_cast<int>(tokens_.size()) - n_computed_; }

  // The prompt (with BOS), then the generated tokens.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int n_computed() const { return n_computed_; }    // positions already in the KV cache
  int slot() const { return slot_; }                // its KV cache slot (block table)
  int scheduled() const { return scheduled_; }      // positions of it in its group in flight
  int passed_over() const { return passed_over_; }  // groups planned without its pending prompt
  int n_generated() const { return n_generated_; }
  int sample_index() const { return sample_index_; }  // which of its request's n samples
  // Samples still to fork from it: n − 1 for the first sample of a request of n until the step
  // of its last prompt position comes back; then 0. That position's logit row is asked for 1 +
  // this many times.
  int samples_to_fork() const { return forks_left_; }
  Clock::time_point admitted() const { return admitted_; }
  Clock::time_point first_token() const { return first_token_; }

  // Scored positions: a scoring request's continuation, or the prompt of a request that asks for
  // its log-probabilities (prompt_logprobs, or echo with logprobs), whose rows return that many
  // top tokens (prompt_top; -1: it scores none).
  int prompt_top() const;
  bool scores() const { return request.scoring || prompt_top() >= 0; }
  // The first position whose logits are still to score (position p predicts token p + 1). A
  // preempted request recomputes its positions from 0, and those it already scored must not be
  // scored again.
  int first_unscored() const { return (request.scoring ? n_context : 1) - 1 + score_.n_tokens; }
  // Whether position p yields a scored logit row.
  bool scores_position(int p) const {
    return scores() && p >= first_unscored() && p + 1 < score_end();
  }
  // Scoring rows among positions [from, to).
  int scoring_rows(int from, int to) const;
  // Scored rows still to come back before a generation request's first sampled row.
  int prompt_rows_left() const {
    return request.scoring || !scores() ? 0 : std::max(0, score_end() - 1 - first_unscored());
  }

  // The changes below are the Scheduler's (tests drive them by hand); each checks that its state
  // allows it.

  // Admission: the KV slot it holds until it is retired.
  void assign_slot(int slot);
  // Its first `positions` positions are served from the prefix cache (it holds no block yet).
  void skip_cached(int positions);
  // Planned into a group: `positions` positions from n_computed are computed by it.
  void start_step(int positions);
  // Its group came back: the scheduled positions are computed.
  void end_step();
  // A group was planned: taken into it (`in_group`) or passed over with its prompt pending.
  void count_pass(bool in_group) { passed_over_ = in_group ? 0 : passed_over_ + 1; }
  // Its blocks were taken back: every position is computed again.
  void preempt();
  // The uniform of its next sampled token (its own stream, so a seed gives the same tokens in any
  // batch).
  double next_uniform() { return rng_.uniform(); }
  // The uniform of sample `index`'s first token, drawn on its behalf before it is forked.
  double fork_uniform(int index) const;
  // Sample `index` of its request, forked once its prompt is computed (samples_to_fork): its
  // prompt computed, its own stream past its first uniform, no slot yet (the Scheduler gives it
  // one sharing this one's blocks), and no token (its first comes from the row drawn for it).
  std::unique_ptr<Sequence> fork(int index);
  // The edits of its next token's logit row `row`: its request's LogitRules over its tokens so far
  // (runtime/logit_edits.h).
  void append_logit_edits(int32_t row, const StopRules& rules, std::vector<LogitEdit>* out) const;
  // A sampled token joins the sequence; once min_tokens are generated a stop id (the model's EOS,
  // the request's stop_token_ids) or a stop string may finish it, as max_tokens or the context may
  // (the text then ends before the stop, unless include_stop_str_in_output). A constrained one's
  // grammar takes the token's bytes; it finishes ("stop") where its grammar can take no more, and
  // with an error record where the grammar fails (too ambiguous, no token of the vocabulary next).
  // defer_mask: a constrained sequence's next mask is left for compute_mask and settle_mask, so
  // that the Scheduler makes a group's masks together (and in parallel).
  void accept_token(int token, const StopRules& rules, bool defer_mask = false);
  // The next mask after a deferred accept_token: whether it is memoized (then taken, cheaply);
  // computing it (any thread, one per sequence); and its consequences (the rank-0 thread): the
  // sequence finishes where only a stop may follow, or fails where no token can.
  bool mask_memoized();
  void compute_mask();
  void settle_mask(const StopRules& rules);
  // Structured outputs, at intake: the grammar its completion must match, from the start. Throws
  // Error when the grammar allows no token of the vocabulary there (or only an empty completion),
  // or is too ambiguous.
  void constrain(std::shared_ptr<const OutputGrammar> grammar, const StopRules& rules);
  bool constrained() const { return grammar_ != nullptr; }
  // A constrained sequence's mask of its next token's logit row `row`: the tokens its grammar takes
  // next, and its stop ids where the grammar may end and nowhere else (model/step_batch.h's
  // TokenMasks).
  void append_token_mask(int32_t row, const StopRules& rules, TokenMasks* out) const;
  // The log-probabilities of a sampled token (the request asked for them).
  void record_logprobs(const RowLogprobs& row, int token);
  // One scored token (of a scoring request's continuation: its logprob, and whether it was the
  // argmax; of a prompt: its logprob, rank and the top tokens).
  void score_token(const RowLogprobs& row, int argmax_token);
  // A scoring request whose every position is computed.
  void finish_scoring() { finish(FinishReason::kScore); }
  // The logits at `position` held a NaN or +inf: the request ends with an error record (the
  // others of the batch go on).
  void fail_non_finite(int position);

  // The record of a finished sequence (moves its text, logprobs and score out).
  Result take_result();

  const Request request;
  const uint64_t order;  // position among the records of this run (for --ordered)
  const int n_prompt;
  const int n_context;  // scoring: tokens before the continuation (BOS included)

 private:
  void finish(FinishReason reason);
  // Its stop ids: the model's EOS ids (unless ignore_eos), then the request's stop_token_ids.
  std::vector<int32_t> stop_ids(const StopRules& rules) const;
  // Positions [.., score_end - 1) are scored: the whole sequence of a scoring request, the prompt
  // of another.
  int score_end() const {
    return request.scoring ? static_cast<int>(tokens_.size()) : (scores() ? n_prompt : 0);
  }
  // The prompt's text as echo writes it: as given, or its token ids decoded.
  std::string prompt_text() const;
  // Echo with logprobs: the prompt's tokens in the legacy layout (the first null), then the
  // completion's.
  std::vector<TokenLogprob> echoed_logprobs();
  // Ends on a stop id or stop string of `token` (whose text starts at `before` in text_).
  bool stop_at(int token, size_t before, const StopRules& rules);
  // The grammar takes a token (its next mask is then due); false when the grammar is complete, or
  // failed (the sequence finished).
  bool advance_grammar(int token, const StopRules& rules);
  void fail_grammar(const std::string& why);

  SequenceState state_ = SequenceState::kWaiting;
  FinishReason finish_reason_ = FinishReason::kNone;
  nlohmann::json stop_reason_ = nullptr;  // the stop string or stop_token_ids id that ended it
  std::vector<int32_t> tokens_;
  int n_computed_ = 0;
  int slot_ = -1;
  int scheduled_ = 0;
  int passed_over_ = 0;
  int n_generated_ = 0;
  int sample_index_ = 0;
  int forks_left_ = 0;
  Rng rng_;
  PenaltyCounts penalties_;
  std::string text_;
  std::string error_;  // why, when finish_reason is kError
  std::vector<TokenLogprob> logprobs_;
  ScoreResult
      score_;  // scoring: accumulated over the continuation; n_tokens counts prompt rows too
  std::vector<PositionLogprobs> prompt_scores_;  // prompt_logprobs or echo: by position from 1
  const Clock::time_point admitted_;
  Clock::time_point first_token_;
  const Tokenizer* tokenizer_;
  IncrementalDetokenizer detok_;
  // Structured outputs: the grammar, where the text stands in it, and the tokens it takes next.
  std::shared_ptr<const OutputGrammar> grammar_;
  std::optional<grammar::Matcher> matcher_;
  std::shared_ptr<const grammar::TokenMask> next_mask_;
  bool mask_due_ = false;   // the grammar took a token whose mask is still to make
  std::string mask_error_;  // making it failed (too ambiguous)
};

// The sequences in flight through the engine, in admission order (oldest first).
using ActiveSequences = std::deque<std::unique_ptr<Sequence>>;

}  // namespace tpllama
