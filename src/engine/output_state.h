// OutputState: what one sequence's record is made of as its rows come back (vLLM v1's
// RequestState under its OutputProcessor) — its text, detokenized as each token comes, the stop
// ids, stop strings, max_tokens and context that end it, its logprobs, its scored positions, and
// its times — and its record once it is finished. The ResultPublisher owns one per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/sequence.h"
#include "io/request.h"
#include "model/step_batch.h"
#include "text/tokenizer.h"

namespace tpllama {

// What ends a generation besides the request's own max_tokens and stop strings.
struct StopRules {
  std::vector<int> eos_token_ids;  // FinishReason::kStop, unless the request ignores EOS
  int context = 0;                 // tokens per sequence, prompt + completion: kLength
};

// A request's stop ids: the model's EOS ids (unless ignore_eos), then its stop_token_ids.
std::vector<int32_t> stop_ids(const Request& r, const StopRules& rules);

class OutputState {
 public:
  // request: its sequence's, which outlives the state. tokenizer may be null (token-id requests: no
  // text). admitted: when its request was read (the start of its time to first token).
  OutputState(const Request& request, const Tokenizer* tokenizer, std::span<const int32_t> prompt,
              Clock::time_point admitted);

  // The state of sample k of the same request, forked with its prompt's scores.
  OutputState fork(std::span<const int32_t> prompt) const;

  // s's newest token (s.tokens().back()) is detokenized into the text. Returns how it ends s, or
  // kNone: once min_tokens are generated a stop id (the model's EOS, the request's stop_token_ids)
  // or a stop string stops it (the text then ends before the stop, unless
  // include_stop_str_in_output), and max_tokens or the context make it kLength (the detokenizer's
  // held bytes then join the text).
  FinishReason take_token(const Sequence& s, const StopRules& rules);
  // The detokenizer's held bytes join the text: s ends where no stop string cut it (its grammar is
  // complete).
  void flush();
  // The log-probabilities of a sampled token (the request asked for them).
  void record_logprobs(const RowLogprobs& row, int token);
  // One scored row: `target` (the token the row scores) of a scoring request's continuation, with
  // whether it was the argmax, or of a prompt, with its rank and the top tokens.
  void score_token(const RowLogprobs& row, int target, int argmax_token);
  // The record is an error record saying why.
  void fail(std::string why) { error_ = std::move(why); }

  Clock::time_point admitted() const { return admitted_; }
  Clock::time_point first_token() const { return first_token_; }
  // The record of finished s (moves the text, logprobs and scores out).
  Result take_result(const Sequence& s);

 private:
  // Ends on a stop id or stop string of `token` (whose text starts at `before` in text_).
  bool stop_at(int token, size_t before, const StopRules& rules);
  // The prompt's text as echo writes it: as given, or its token ids decoded.
  std::string prompt_text() const;
  // Echo with logprobs: the prompt's tokens in the legacy layout (the first null), then the
  // completion's.
  std::vector<TokenLogprob> echoed_logprobs(int32_t first_token);

  const Request* request_;
  const Tokenizer* tokenizer_;
  IncrementalDetokenizer detok_;
  std::string text_;
  std::string echoed_prompt_;             // echo of a truncated prompt: its kept tokens' text
  nlohmann::json stop_reason_ = nullptr;  // the stop string or stop_token_ids id that ended it
  std::string error_;                     // why, for an error record
  std::vector<TokenLogprob> logprobs_;
  ScoreResult score_;                            // scoring: accumulated over the continuation
  std::vector<PositionLogprobs> prompt_scores_;  // prompt_logprobs or echo: by position from 1
  Clock::time_point admitted_;
  Clock::time_point first_token_;
};

}  // namespace tpllama
