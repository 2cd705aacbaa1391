// Sequence: one request's state on rank 0 while it runs — its tokens (prompt, then generated), how
// many of them the KV cache holds, its random stream and detokenizer, its text or score — and the
// rules that finish it: stop ids, stop strings, max_tokens, the context.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "io/request.h"
#include "runtime/sampler.h"
#include "runtime/step_plan.h"
#include "text/tokenizer.h"

namespace tpllama {

// What ends a generation besides the request's own max_tokens and stop strings.
struct StopRules {
  std::vector<int> eos_token_ids;  // finish_reason "stop", unless the request ignores EOS
  int context = 0;                 // tokens per sequence, prompt + completion: "length"
};

struct Sequence {
  // tokens: the request's prompt as the model is given it; n_context: of those, the scoring
  // request's context (BOS included). tokenizer may be null (token-id requests: no text).
  Sequence(Request r, const Tokenizer* tokenizer, std::vector<int32_t> tokens, int n_context, uint64_t order);

  bool decoding() const { return n_computed >= n_prompt; }
  bool finished() const { return !finish_reason.empty(); }
  // Positions still to compute: the rest of the prompt, or the last sampled token.
  int pending() const { return static_cast<int>(tokens.size()) - n_computed; }

  // Scoring: the first position whose logits are still to score (position p predicts token p + 1
  // of the continuation). A preempted request recomputes its positions from 0, and those it
  // already scored must not be scored again.
  int first_unscored() const { return n_context - 1 + score.n_tokens; }
  // Whether position p of a scoring request yields a scored logit row.
  bool scores_position(int p) const { return p >= first_unscored() && p + 1 < static_cast<int>(tokens.size()); }
  // Scoring rows among positions [from, to).
  int scoring_rows(int from, int to) const;

  // A sampled token joins the sequence; a stop id, a stop string, max_tokens or the context may
  // finish it (the text then ends before the stop string).
  void accept_token(int token, const StopRules& rules);
  // The log-probabilities of a sampled token (the request asked for them).
  void record_logprobs(const RowLogprobs& row, int token);
  // One continuation token of a scoring request: its logprob, and whether it was the argmax.
  void score_token(const RowLogprobs& row, int argmax_token);
  // The logits at `position` held a NaN or +inf: the request ends with an error record (the
  // others of the batch go on).
  void fail_non_finite(int position);
  // Its blocks were taken back: every position is computed again.
  void preempt() { n_computed = 0; }
  // The record of a finished sequence (moves its text, logprobs and score out).
  Result take_result();

  Request request;
  uint64_t order = 0;           // position among the records of this run (for --ordered)
  std::vector<int32_t> tokens;  // prompt (with BOS) followed by generated tokens
  int n_prompt = 0;
  int n_context = 0;   // scoring: tokens before the continuation (BOS included)
  int n_computed = 0;  // positions already in the KV cache
  int slot = -1;       // its KV cache slot (block table), from the BlockAllocator
  int scheduled = 0;   // tokens of this sequence in its group in flight
  bool in_flight = false;
  bool prefix_looked_up = false;  // the prefix cache was asked for its prompt (counted once)
  int passed_over = 0;            // groups planned without its pending prompt (Scheduler)
  int n_generated = 0;
  Rng rng;
  std::string text;
  std::string finish_reason;  // empty while running
  std::string error;          // why, when finish_reason is "error"
  std::vector<TokenLogprob> logprobs;
  ScoreResult score;  // scoring: accumulated over the continuation
  Clock::time_point admitted = Clock::now();
  Clock::time_point first_token;

 private:
  const Tokenizer* tokenizer_;
  IncrementalDetokenizer detok_;
};

// The sequences in flight through the engine, in admission order (oldest first).
using ActiveSequences = std::deque<std::unique_ptr<Sequence>>;

}  // namespace tpllama
