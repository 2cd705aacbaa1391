// Planning micro-batch groups and applying their tokens.
#include "runtime/scheduler.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.h"

namespace tpllama {

Scheduler::Scheduler(const SchedulerLimits& limits, BlockAllocator& blocks, StopRules rules)
    : limits_(limits),
      blocks_(blocks),
      rules_(std::move(rules)),
      seqs_per_group_((limits.max_seqs + limits.groups - 1) / limits.groups) {
  TPLLAMA_CHECK(limits.max_batch_tokens > 0 && limits.max_logit_rows > 0 && limits.max_seqs > 0 &&
                    limits.groups > 0,
                "scheduler limits: ", limits.max_batch_tokens, " tokens, ", limits.max_logit_rows,
                " rows, ", limits.max_seqs, " sequences, ", limits.groups, " groups");
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
    const int sampled = !s.request.scoring && t == s.pending() ? 1 + s.samples_to_fork() : 0;
    return s.scoring_rows(s.n_computed(), s.n_computed() + t) + sampled;
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
  for (const auto& s : active)
    if (!s->decoding()) s->count_pass(s->in_flight());
  draft.plan.group = draft.group.id = next_group_++;
  draft.plan.cache_ops = blocks_.take_changes();
  in_flight_.push_back(std::move(draft.group));
  return std::move(draft.plan);
}

std::vector<bool> Scheduler::first_choices(const ActiveSequences& active) const {
  std::vector<bool> first_choice(active.size());
  for (size_t k = 0; k < active.size(); ++k) {
    const Sequence& s = *active[k];
    first_choice[k] = !blocks_.prefix_caching() || !blocks_.table(s.slot()).empty() ||
                      s.passed_over() >= kPatience || blocks_.first_block_cached(s);
  }
  return first_choice;
}

bool Scheduler::consider(Sequence& s, int pass, Draft& draft, const ActiveSequences& active) {
  if (s.in_flight() || draft.budget == 0) return true;
  bool starting = false;  // a preempted sequence may come back from the cache already decoding
  if (pass >= 1 && blocks_.table(s.slot()).empty() && s.n_computed() == 0) {
    // A sequence starting (or restarting after a preemption) takes what the prefix cache holds of
    // it; if this group is writing its first block, it starts in the next group instead.
    if (blocks_.first_block_being_written(s)) return true;
    s.skip_cached(blocks_.attach_cached_prefix(s));
    starting = true;
  }
  if ((pass == 0) != s.decoding() && !starting) return true;
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
  for (int i = 0; i < take; ++i) {
    const int p = s.n_computed() + i;
    batch.tokens.push_back(s.tokens()[static_cast<size_t>(p)]);
    batch.positions.push_back(p);
    batch.slots.push_back(s.slot());
    if (s.scores_position(p)) {  // the row of the next token's log-probability
      batch.logit_rows.push_back(static_cast<int32_t>(batch.positions.size()) - 1);
      draft.plan.sampling.push_back({SamplingParams{}, 0.0, s.request.scoring ? -1 : s.prompt_top(),
                                     s.tokens()[static_cast<size_t>(p) + 1]});
      group.rows.push_back(&s);
      --draft.rows_left;
    }
  }
  if (take == pending && !s.request.scoring) {
    // A request of n samples asks for its last prompt position's row n times, one per sample.
    const int samples = 1 + s.samples_to_fork();
    const SamplingParams& p = s.request.sampling;
    for (int k = 0; k < samples; ++k) {
      batch.logit_rows.push_back(static_cast<int32_t>(batch.positions.size()) - 1);
      const auto row = static_cast<int32_t>(draft.plan.sampling.size());
      const double uniform =
          p.temperature <= 0 ? 0.0 : (k == 0 ? s.next_uniform() : s.fork_uniform(k));
      draft.plan.sampling.push_back({p, uniform, s.request.logprobs, -1});
      s.append_logit_edits(row, rules_, &draft.plan.edits);
      if (s.constrained()) s.append_token_mask(row, rules_, &draft.plan.masks);
      group.rows.push_back(&s);
    }
    draft.rows_left -= samples;
  }
  if (s.decoding()) {
    group.decode_tokens += take;
    const int seen = s.n_computed() + take;  // the positions its attention reads
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
    if (victim.in_flight() || blocks_.table(victim.slot()).empty()) continue;
    blocks_.release_blocks(victim.slot());
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

std::vector<Fork> Scheduler::apply(const Group& group, const SampledRows& rows,
                                   const StopRules& rules) {
  TPLLAMA_CHECK(rows.group == group.id && rows.tokens.size() == group.rows.size(),
                rows.tokens.size(), " tokens of group ", rows.group, " for the ", group.rows.size(),
                " rows of group ", group.id);
  for (Sequence* s : group.members) s->end_step();
  std::vector<const RowLogprobs*> by_row(group.rows.size(), nullptr);
  for (const RowLogprobs& l : rows.logprobs) by_row.at(static_cast<size_t>(l.row)) = &l;
  std::vector<Fork> forks;
  std::vector<Sequence*> took_token;  // the constrained ones' next masks are made below
  // The sequence whose sampled row the previous row was: a row of it again is a sample to fork,
  // whatever became of the first (the samples of a request come back together).
  const Sequence* sampled = nullptr;
  int sample = 0;
  for (size_t r = 0; r < group.rows.size(); ++r) {
    Sequence* s = group.rows[r];
    const bool repeat = s == sampled;
    sample = repeat ? sample + 1 : 0;
    if (repeat) {
      forks.push_back({s, s->fork(sample)});
      s = forks.back().child.get();
    }
    const bool scored = s->request.scoring || s->prompt_rows_left() > 0;
    sampled = scored ? nullptr : group.rows[r];
    if (s->finished()) continue;  // an earlier row of it was not finite
    if (rows.tokens[r] == kNonFiniteRow) {
      // Position of the row's logits: the scored one, or the last computed before the next token.
      s->fail_non_finite(scored ? s->first_unscored() : s->n_computed() - 1);
      continue;
    }
    if (scored) {
      TPLLAMA_CHECK(by_row[r] != nullptr, "scored row ", r, " came back without its logprob");
      s->score_token(*by_row[r], rows.tokens[r]);
      continue;
    }
    if (by_row[r] != nullptr) s->record_logprobs(*by_row[r], rows.tokens[r]);
    s->accept_token(rows.tokens[r], rules, /*defer_mask=*/true);
    took_token.push_back(s);
  }
  make_masks(took_token, rules);
  for (Sequence* s : group.members)
    if (s->request.scoring && !s->finished() &&
        s->n_computed() == static_cast<int>(s->tokens().size()))
      s->finish_scoring();
  return forks;
}

void Scheduler::make_masks(const std::vector<Sequence*>& sequences, const StopRules& rules) {
  std::vector<Sequence*> walks;  // those whose state's mask is not memoized
  for (Sequence* s : sequences)
    if (!s->finished() && s->constrained() && !s->mask_memoized()) walks.push_back(s);
  const size_t threads =
      std::min<size_t>(walks.size(), std::max(1u, std::thread::hardware_concurrency()));
  if (threads >= 2) {  // each walk is a pass over the vocabulary trie: one thread per few of them
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i = next++; i < walks.size(); i = next++) walks[i]->compute_mask();
    };
    std::vector<std::thread> pool;
    try {
      for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    } catch (const std::system_error&) {  // no more threads now: those started, and this one
    }
    work();
    for (std::thread& t : pool) t.join();
  }
  for (Sequence* s : sequences)
    if (!s->finished()) s->settle_mask(rules);
}

void Scheduler::adopt(std::vector<Fork> forks, ActiveSequences& active) {
  for (Fork& f : forks) {
    // A sample its first token finished takes no slot: it is retired with the step.
    if (!f.child->finished()) f.child->assign_slot(blocks_.fork_slot(f.parent->slot()));
    // After its parent and the samples forked before it: a sample keeps its request's age.
    auto at = std::find_if(active.begin(), active.end(),
                           [&](const std::unique_ptr<Sequence>& s) { return s.get() == f.parent; });
    TPLLAMA_CHECK(at != active.end(), "sample ", f.child->sample_index(),
                  " forked from a sequence that is not active");
    while (at != active.end() && (*at)->order == f.parent->order) ++at;
    active.insert(at, std::move(f.child));
  }
}

}  // namespace tpllama
