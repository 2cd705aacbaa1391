// Scheduler: rank 0's plan of each step — one micro-batch group of the sequences not in flight,
// decodes first then prefill chunks, within the token budget, logit rows and KV blocks — with up to
// `groups` in flight (one per pipeline stage), and each group's sampled tokens applied on return.
// It alone moves a sequence between its states (admission, a step, preemption, the finish), as
// vLLM v1's scheduler does; when blocks run short it chooses whom to preempt.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/logit_edits.h"
#include "engine/output_state.h"
#include "engine/sequence.h"
#include "executor/step_plan.h"

namespace tpllama {

struct SchedulerLimits {
  int max_batch_tokens = 2048;  // tokens per forward step (prefill is chunked to fit)
  int max_logit_rows = 64;   // logit rows per step (the model's buffer): decodes plus scored tokens
  int max_seqs = 64;         // sequences in flight at once, spread over the groups
  int groups = 1;            // micro-batch groups in flight (the pipeline depth)
  int attention_window = 0;  // positions a token attends to (Mistral's sliding window); 0: all
};

// A micro-batch group in flight: its sequences, the sequence of each logit row, and its size.
struct Group {
  int64_t id = 0;
  std::vector<Sequence*> members;  // every sequence with tokens in the group
  std::vector<Sequence*> rows;     // the sequences owning each logit row, in row order
  int prefill_tokens = 0;          // prompt tokens in the group
  int decode_tokens = 0;
  long long decode_context = 0;  // positions its decode tokens attend to
};

// A sample forked from the first of its request when that one's prompt came back computed
// (Sequence::fork), before the Scheduler adopts it.
struct Fork {
  Sequence* parent = nullptr;
  std::unique_ptr<Sequence> child;
};

// What one logit row of a group came back with, for its sequence's output (ResultPublisher::apply).
struct RowOutcome {
  enum class Kind : uint8_t {
    kSampled,    // `token` joined the sequence
    kScored,     // the row scores `target` (`token`: the row's argmax)
    kNonFinite,  // its logits (at `position`) held a NaN or +inf: the sequence failed
  };
  Sequence* sequence = nullptr;
  Kind kind = Kind::kSampled;
  int token = 0;
  int target = 0;
  int position = 0;
  const RowLogprobs* logprobs = nullptr;  // where the row asked for them (the SampledRows' own)
  const Sequence* forked_from = nullptr;  // the row forked its sequence from this one
};

// A group applied: its rows' outcomes in row order, and the samples forked (Scheduler::adopt).
struct AppliedGroup {
  std::vector<RowOutcome> rows;
  std::vector<Fork> forks;
};

class StructuredOutputs;

class Scheduler {
 public:
  // Groups a prompt may be passed over for others whose prefix is cached before it goes first.
  static constexpr int kPatience = 4;

  // rules: the stop ids a row's min_tokens bans. structured (may be null): the masks of
  // constrained sequences' rows.
  Scheduler(const SchedulerLimits& limits, BlockAllocator& blocks, StopRules rules = {},
            const StructuredOutputs* structured = nullptr);

  // Whether another group may go in flight.
  bool has_room() const { return static_cast<int>(in_flight_.size()) < limits_.groups; }
  bool idle() const { return in_flight_.empty(); }
  size_t in_flight() const { return in_flight_.size(); }
  long long preemptions() const { return preemptions_; }
  // Groups planned since s's prompt was last taken into one (kPatience).
  int passed_over(const Sequence& s) const {
    return passed_over_.at(static_cast<size_t>(s.counts().slot));
  }

  // A sequence the engine admits takes a KV slot; a finished one gives it back.
  void admit(Sequence& s);
  void retire(const Sequence& s) {
    if (s.counts().slot >= 0)
      blocks_.release_slot(s.counts().slot);  // a fork finished by its first token has none
  }

  // Plans one group from the sequences of `active` that are not in flight (see the file comment),
  // which then is in flight; its plan carries the block table changes made for it and before it.
  // nullopt when there is no room or no sequence can take a step now.
  std::optional<StepPlan> schedule(const ActiveSequences& active);

  // The oldest group in flight leaves the pipeline (groups return in the order they were planned).
  Group take_oldest();

  // Applies a group's sampled rows (vLLM v1's update_from_output): its sequences' scheduled
  // positions are computed, each logit row gives its sequence a token or a scored row, a non-finite
  // row fails its sequence, and a scoring request whose every position is computed finishes. A row
  // repeated for a request of n samples forks sample k from its k-th repeat, with that row's token.
  // The rows' outcomes go to output processing (ResultPublisher::apply), which finishes whom a stop
  // or a grammar ends; then the forks to adopt.
  AppliedGroup apply(const Group& group, const SampledRows& rows);
  // Gives each fork a slot whose table shares its parent's blocks (none to one its first token
  // finished), and puts it in `active` after its parent and the samples forked before it.
  void adopt(std::vector<Fork> forks, ActiveSequences& active);

  // Gives s the blocks for up to `take` more positions after its n_computed, first preempting the
  // youngest sequences of `active` admitted after s that are not in flight while blocks are short.
  // Returns how many positions s may compute now (0: none; it waits for blocks held by sequences
  // in flight).
  int reserve(Sequence& s, int take, const ActiveSequences& active);

 private:
  struct Draft;  // the group being planned

  // The prefill sequences pass 1 takes (see schedule in scheduler.cpp).
  std::vector<bool> first_choices(const ActiveSequences& active) const;
  // Pass `pass` looks at s: it joins the draft with a chunk if it may. False once the group is
  // full.
  bool consider(Sequence& s, int pass, Draft& draft, const ActiveSequences& active);
  // s computes `take` positions in the draft: its tokens, positions, slots and logit rows.
  void add_chunk(Sequence& s, int take, Draft& draft);
  // Shrinks a chunk of `take` positions of s so its logit rows fit in rows_left; 0 when none fits.
  static int fit_rows(const Sequence& s, int take, int rows_left);
  // Preempts the youngest sequence admitted after s that is not in flight and holds blocks; false
  // when there is none.
  bool preempt_younger_than(const Sequence& s, const ActiveSequences& active);

  // The edits of s's next row `row` (logit_bias, penalties, min_tokens' bans).
  void append_logit_edits(const Sequence& s, int32_t row, std::vector<LogitEdit>* out) const;

  SchedulerLimits limits_;
  BlockAllocator& blocks_;
  StopRules rules_;
  const StructuredOutputs* structured_;
  // By slot: its sequence's penalty counts (while a penalty is on), and the groups planned without
  // its pending prompt (Scheduler::kPatience).
  std::vector<PenaltyCounts> penalties_;
  std::vector<int> passed_over_;
  int seqs_per_group_;
  std::deque<Group> in_flight_;
  int64_t next_group_ = 0;
  long long preemptions_ = 0;
};

}  // namespace tpllama
