// Planning micro-batch groups and applying their tokens.
#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "engine/structured_outputs.h"

namespace tpllama {

Scheduler::Scheduler(const SchedulerLimits& limits, BlockAllocator& blocks, StopRules rules,
                     const StructuredOutputs* structured)
    : limits_(limits),
      blocks_(blocks),
      rules_(std::move(rules)),
      structured_(structured),
      penalties_(static_cast<size_t>(std::max(limits.max_seqs, 0)), PenaltyCounts({}, {})),
      passed_over_(static_cast<size_t>(std::max(limits.max_seqs, 0)), 0),
      seqs_per_group_((limits.max_seqs + limits.groups - 1) / limits.groups) {
  TPLLAMA_CHECK(limits.max_batch_tokens > 0 && limits.max_logit_rows > 0 && limits.max_seqs > 0 &&
                    limits.groups > 0,
                "scheduler limits: ", limits.max_batch_tokens, " tokens, ", limits.max_logit_rows,
                " rows, ", limits.max_seqs, " sequences, ", limits.groups, " groups");
}

void Scheduler::admit(Sequence& s) {
  s.assign_slot(blocks_.acquire_slot());
  const auto slot = static_cast<size_t>(s.counts().slot);
  TPLLAMA_CHECK(slot < penalties_.size(), "slot ", slot, " of a scheduler of ", penalties_.size(),
                " sequences");
  penalties_.at(slot) = PenaltyCounts(s.request().logit_rules, s.tokens());
  passed_over_[slot] = 0;
}

// The group being planned: its plan, its sequences, and the tokens and logit rows it has left.
struct Scheduler::Draft {
  StepPlan plan;
  Group group;
  int budget = 0;
  int rows_left = 0;
};

int Scheduler::fit_rows(const Sequence& s, int take, int rows_left) {
  // Its scored positions' rows, and at its last pending position its sampled rows.
  const auto rows = [&s](int t) {
    const int sampled = !s.request().scoring && t == s.pending() ? 1 + s.counts().forks_left : 0;
    return scoring_rows(s, s.counts().computed, s.counts().computed + t) + sampled;
  };
  while (take > 0 && rows(take) > rows_left) --take;
  return take;
}

// Pass 0: decodes. Prefill, with the prefix cache: pass 1 takes sequences already under way, those
// whose prompt starts with a cached block, and those passed over kPatience times; pass 2 the rest.
// Without it, pass 1 takes every prefill in admission order.
std::optional<StepPlan> Scheduler::schedule(const ActiveSequences& active) {
  if (!has_room()) return std::nullopt;
  Draft draft;
  draft.budget = limits_.max_batch_tokens;
  draft.rows_left = limits_.max_logit_rows;
  blocks_.begin_group(next_group_);
  const std::vector<bool> first_choice = first_choices(active);
  for (int pass = 0; pass < 3 && static_cast<int>(draft.group.members.size()) < seqs_per_group_;
       ++pass) {
    for (size_t k = 0; k < active.size(); ++k) {
      if ((pass == 1 && !first_choice[k]) || (pass == 2 && first_choice[k])) continue;
      if (!consider(*active[k], pass, draft, active)) break;
    }
  }
  if (draft.group.members.empty()) return std::nullopt;
  for (const auto& s : active) {  // a prompt passed over counts, one taken starts again
    if (s->counts().decoding()) continue;
    int& passed = passed_over_[static_cast<size_t>(s->counts().slot)];
    passed = s->state() == SequenceState::kInFlight ? 0 : passed + 1;
  }
  draft.plan.group = draft.group.id = next_group_++;
  draft.plan.cache_ops = blocks_.take_changes();
  in_flight_.push_back(std::move(draft.group));
  return std::move(draft.plan);
}

std::vector<bool> Scheduler::first_choices(const ActiveSequences& active) const {
  std::vector<bool> first_choice(active.size());
  for (size_t k = 0; k < active.size(); ++k) {
    const Sequence& s = *active[k];
    first_choice[k] = !blocks_.prefix_caching() || !blocks_.table(s.counts().slot).empty() ||
                      passed_over_[static_cast<size_t>(s.counts().slot)] >= kPatience ||
                      blocks_.first_block_cached(s);
  }
  return first_choice;
}

bool Scheduler::consider(Sequence& s, int pass, Draft& draft, const ActiveSequences& active) {
  if (s.state() == SequenceState::kInFlight || draft.budget == 0) return true;
  bool starting = false;  // a preempted sequence may come back from the cache already decoding
  if (pass >= 1 && blocks_.table(s.counts().slot).empty() && s.counts().computed == 0) {
    // A sequence starting (or restarting after a preemption) takes what the prefix cache holds of
    // it; if this group is writing its first block, it starts in the next group instead.
    if (blocks_.first_block_being_written(s)) return true;
    s.skip_cached(blocks_.attach_cached_prefix(s));
    starting = true;
  }
  if ((pass == 0) != s.counts().decoding() && !starting) return true;
  if (static_cast<int>(draft.group.members.size()) >= seqs_per_group_) return false;
  const int fitting = fit_rows(s, std::min(s.pending(), draft.budget), draft.rows_left);
  const int take = fitting == 0 ? 0 : reserve(s, fitting, active);
  if (take == 0) return true;  // waits for blocks held by sequences in flight, or for rows
  add_chunk(s, take, draft);
  return true;
}

void Scheduler::add_chunk(Sequence& s, int take, Draft& draft) {
  StepBatch& batch = draft.plan.batch;
  Group& group = draft.group;
  const int pending = s.pending();
  const Request& r = s.request();
  for (int i = 0; i < take; ++i) {
    const int p = s.counts().computed + i;
    batch.tokens.push_back(s.tokens()[static_cast<size_t>(p)]);
    batch.positions.push_back(p);
    batch.slots.push_back(s.counts().slot);
    if (scores_position(s, p)) {  // the row of the next token's log-probability
      batch.logit_rows.push_back(static_cast<int32_t>(batch.positions.size()) - 1);
      draft.plan.sampling.push_back({SamplingParams{}, 0.0, r.scoring ? -1 : prompt_top(r),
                                     s.tokens()[static_cast<size_t>(p) + 1]});
      group.rows.push_back(&s);
      --draft.rows_left;
    }
  }
  if (take == pending && !r.scoring) {
    // A request of n samples asks for its last prompt position's row n times, one per sample.
    const int samples = 1 + s.counts().forks_left;
    const SamplingParams& p = r.sampling;
    for (int k = 0; k < samples; ++k) {
      batch.logit_rows.push_back(static_cast<int32_t>(batch.positions.size()) - 1);
      const auto row = static_cast<int32_t>(draft.plan.sampling.size());
      const double uniform =
          p.temperature <= 0 ? 0.0 : (k == 0 ? s.next_uniform() : first_uniform(r, k));
      draft.plan.sampling.push_back({p, uniform, r.logprobs, -1});
      append_logit_edits(s, row, &draft.plan.edits);
      if (structured_ != nullptr && structured_->constrained(s))
        structured_->append_mask(s, row, &draft.plan.masks);
      group.rows.push_back(&s);
    }
    draft.rows_left -= samples;
  }
  if (s.counts().decoding()) {
    group.decode_tokens += take;
    const int seen = s.counts().computed + take;  // the positions its attention reads
    group.decode_context +=
        limits_.attention_window > 0 ? std::min(seen, limits_.attention_window) : seen;
  } else {
    group.prefill_tokens += take;
  }
  s.start_step(take);
  blocks_.register_full_blocks(s);
  group.members.push_back(&s);
  draft.budget -= take;
}

int Scheduler::reserve(Sequence& s, int take, const ActiveSequences& active) {
  while (blocks_.shortfall(s, take) > 0 && preempt_younger_than(s, active)) {
  }
  return blocks_.reserve(s, take);
}

bool Scheduler::preempt_younger_than(const Sequence& s, const ActiveSequences& active) {
  for (auto it = active.rbegin(); it != active.rend() && it->get() != &s; ++it) {
    Sequence& victim = **it;
    if (victim.state() == SequenceState::kInFlight || blocks_.table(victim.counts().slot).empty())
      continue;
    blocks_.release_blocks(victim.counts().slot);
    victim.preempt();
    ++preemptions_;
    return true;
  }
  return false;
}

Group Scheduler::take_oldest() {
  TPLLAMA_CHECK(!in_flight_.empty(), "no group in flight");
  Group g = std::move(in_flight_.front());
  in_flight_.pop_front();
  return g;
}

void Scheduler::append_logit_edits(const Sequence& s, int32_t row,
                                   std::vector<LogitEdit>* out) const {
  const LogitRules& r = s.request().logit_rules;
  const std::vector<int32_t> banned =
      s.counts().generated < r.min_tokens ? stop_ids(s.request(), rules_) : std::vector<int32_t>{};
  penalties_[static_cast<size_t>(s.counts().slot)].append_edits(r, row, banned, out);
}

AppliedGroup Scheduler::apply(const Group& group, const SampledRows& rows) {
  TPLLAMA_CHECK(rows.group == group.id && rows.tokens.size() == group.rows.size(),
                rows.tokens.size(), " tokens of group ", rows.group, " for the ", group.rows.size(),
                " rows of group ", group.id);
  for (Sequence* s : group.members) s->end_step();
  std::vector<const RowLogprobs*> by_row(group.rows.size(), nullptr);
  for (const RowLogprobs& l : rows.logprobs) by_row.at(static_cast<size_t>(l.row)) = &l;
  AppliedGroup applied;
  // The sequence whose sampled row the previous row was: a row of it again is a sample to fork,
  // whatever became of the first (the samples of a request come back together).
  const Sequence* sampled = nullptr;
  int sample = 0;
  for (size_t r = 0; r < group.rows.size(); ++r) {
    RowOutcome o;
    Sequence* s = group.rows[r];
    const bool repeat = s == sampled;
    sample = repeat ? sample + 1 : 0;
    if (repeat) {
      applied.forks.push_back({s, s->fork(sample)});
      o.forked_from = s;
      s = applied.forks.back().child.get();
    }
    const bool scored = s->request().scoring || prompt_rows_left(*s) > 0;
    sampled = scored ? nullptr : group.rows[r];
    if (s->state() == SequenceState::kFinished) continue;  // an earlier row of it was not finite
    o.sequence = s;
    o.token = rows.tokens[r];
    o.logprobs = by_row[r];
    if (o.token == kNonFiniteRow) {
      // Position of the row's logits: the scored one, or the last computed before the next token.
      o.kind = RowOutcome::Kind::kNonFinite;
      o.position = scored ? first_unscored(*s) : s->counts().computed - 1;
      s->finish(FinishReason::kError);
    } else if (scored) {
      TPLLAMA_CHECK(o.logprobs != nullptr, "scored row ", r, " came back without its logprob");
      o.kind = RowOutcome::Kind::kScored;
      o.target = s->tokens()[static_cast<size_t>(first_unscored(*s) + 1)];
      s->count_scored();
    } else {
      s->append_token(o.token);
      if (s->counts().slot >= 0)  // a fork's are counted as it is adopted
        penalties_[static_cast<size_t>(s->counts().slot)].add_generated(o.token);
    }
    applied.rows.push_back(o);
  }
  for (Sequence* s : group.members)
    if (s->request().scoring && s->state() != SequenceState::kFinished &&
        s->counts().computed == static_cast<int>(s->tokens().size()))
      s->finish(FinishReason::kScore);
  return applied;
}

void Scheduler::adopt(std::vector<Fork> forks, ActiveSequences& active) {
  for (Fork& f : forks) {
    Sequence& child = *f.child;
    // A sample its first token finished takes no slot: it is retired with the step.
    if (child.state() != SequenceState::kFinished) {
      child.assign_slot(blocks_.fork_slot(f.parent->counts().slot));
      const auto slot = static_cast<size_t>(child.counts().slot);
      TPLLAMA_CHECK(slot < penalties_.size(), "slot ", slot, " of a scheduler of ",
                    penalties_.size(), " sequences");
      const std::span<const int32_t> tokens = child.tokens();
      penalties_[slot] = PenaltyCounts(child.request().logit_rules,
                                       tokens.first(static_cast<size_t>(child.counts().prompt)));
      for (const int32_t t : tokens.subspan(static_cast<size_t>(child.counts().prompt)))
        penalties_[slot].add_generated(t);
      passed_over_[slot] = 0;
    }
    // After its parent and the samples forked before it: a sample keeps its request's age.
    auto at = std::find_if(active.begin(), active.end(),
                           [&](const std::unique_ptr<Sequence>& s) { return s.get() == f.parent; });
    TPLLAMA_CHECK(at != active.end(), "sample ", child.counts().sample,
                  " forked from a sequence that is not active");
    while (at != active.end() && (*at)->counts().order == f.parent->counts().order) ++at;
    active.insert(at, std::move(f.child));
  }
}

}  // namespace tpllama
