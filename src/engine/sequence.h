// Sequence: one sample of a request as the Scheduler sees it (vLLM v1's Request) — where it stands
// (SequenceState), its tokens (prompt, then generated), how many of them the KV cache holds, its
// slot, and its random stream. Nothing of its output: the text, stop strings, logprobs and scores
// are its OutputState's (engine/output_state.h), its grammar cursor the StructuredOutputs'.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/random.h"
#include "io/request.h"

namespace tpllama {

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
  kStop,    // a stop id, a stop string, or its grammar complete: "stop"
  kLength,  // max_tokens or the context: "length"
  kScore,   // a scoring request scored its whole continuation: "score"
  kError,   // its logits were not finite, or its grammar failed: "error"
};

// The output record's finish_reason ("" for kNone).
const char* finish_reason_name(FinishReason reason);

// A sequence's numbers; only its own moves change them.
struct SequenceCounts {
  uint64_t order = 0;  // its request's place among the records of this run (for --ordered)
  int slot = -1;       // its KV cache slot (block table); -1 until admitted
  int prompt = 0;      // prompt tokens, BOS included
  int context = 0;     // a scoring request's: of the prompt, the context's (BOS included)
  int computed = 0;    // positions already in the KV cache
  int scheduled = 0;   // positions of it being computed by its group in flight
  // Logit rows scored so far: of a scoring request's continuation, or of a prompt that asks for
  // its log-probabilities (these count before the continuation's).
  int scored = 0;
  int generated = 0;  // tokens sampled for it
  int sample = 0;     // which of its request's n samples
  // Samples still to fork from it: n − 1 for the first sample of a request of n until the step of
  // its last prompt position comes back; then 0. That position's logit row is asked for 1 + this
  // many times.
  int forks_left = 0;

  bool decoding() const { return computed >= prompt; }
};

// The samples of a request of n > 1 are n Sequences. The first is admitted as any other; the logit
// row of its last prompt position is asked for n times (one draw from each sample's own stream),
// and when that step comes back the Scheduler forks the other n − 1 from it (fork): each its own
// slot, whose table holds the first sample's blocks by reference (the BlockAllocator's counts; the
// shared partial last block is copied by whichever writes it first), its prompt computed, its
// first token drawn, and the same states from then on. The prompt is computed once.
class Sequence {
 public:
  // prompt: the request's tokens as the model is given them (the first n_context of a scoring
  // request its context, BOS included); order: its record's place in this run.
  Sequence(std::shared_ptr<const Request> request, std::vector<int32_t> prompt, int n_context,
           uint64_t order);

  const Request& request() const { return *request_; }
  SequenceState state() const { return state_; }
  FinishReason finish_reason() const { return finish_reason_; }
  // The prompt (with BOS), then the generated tokens.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const SequenceCounts& counts() const { return counts_; }
  // Positions still to compute: the rest of the prompt, or the last sampled token.
  int pending() const { return static_cast<int>(tokens_.size()) - counts_.computed; }
  // The uniform of its next sampled token (its own stream, so a seed gives the same tokens in any
  // batch).
  double next_uniform() { return rng_.uniform(); }

  // The moves, each checked against its state; the Scheduler makes them (tests by hand), and
  // output processing finishes a sequence that a stop or its grammar ends.

  // Admission: the KV slot it holds until it is retired.
  void assign_slot(int slot);
  // Its first `positions` positions are served from the prefix cache (it holds no block yet).
  void skip_cached(int positions);
  // Planned into a group: `positions` positions from counts().computed are computed by it.
  void start_step(int positions);
  // Its group came back: the scheduled positions are computed; its scored rows (scoring_rows of
  // them) are counted as they come back, one by one (count_scored).
  void end_step();
  void count_scored() { ++counts_.scored; }
  // A sampled token joins it.
  void append_token(int token);
  // Its blocks were taken back: every position is computed again.
  void preempt();
  void finish(FinishReason reason);
  // Sample `index` of its request, forked once its prompt is computed (counts().forks_left): its
  // prompt computed and scored as this one's, its own stream past its first uniform (drawn on its
  // behalf by first_uniform), no slot yet (the Scheduler gives it one sharing this one's blocks),
  // and no token (its first comes from the row drawn for it).
  std::unique_ptr<Sequence> fork(int index);

 private:
  std::shared_ptr<const Request> request_;  // shared by its samples
  SequenceState state_ = SequenceState::kWaiting;
  FinishReason finish_reason_ = FinishReason::kNone;
  std::vector<int32_t> tokens_;
  SequenceCounts counts_;
  Rng rng_;
};

// The sequences in flight through the engine, in admission order (oldest first).
using ActiveSequences = std::deque<std::unique_ptr<Sequence>>;

// The uniform of sample `index`'s first token, drawn on its behalf before it is forked.
double first_uniform(const Request& request, int index);

// The logit rows a sequence asks for, beside its sampled ones: a scoring request's continuation,
// or the prompt of a request that asks for its log-probabilities (prompt_logprobs, or echo with
// logprobs), whose rows return prompt_top(r) top tokens (-1: it scores none). Position p's row
// scores token p + 1.
int prompt_top(const Request& r);
bool scores(const Sequence& s);
// The first position whose logits are still to score. A preempted request recomputes its
// positions from 0, and those it already scored must not be scored again.
int first_unscored(const Sequence& s);
// Whether position p yields a scored logit row.
bool scores_position(const Sequence& s, int p);
// Scored rows among positions [from, to).
int scoring_rows(const Sequence& s, int from, int to);
// Scored rows still to come back before a generation request's first sampled row.
int prompt_rows_left(const Sequence& s);

}  // namespace tpllama
