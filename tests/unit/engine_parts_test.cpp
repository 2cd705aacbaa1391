// The engine's parts without a model: the block allocator, the scheduler and the request intake
// on hand-made sequences and requests, and the whole engine loop over a stand-in executor whose
// "model" reads every token back through the block tables it is sent, so that a block handed out
// twice, a table change lost, a preempted sequence not recomputed or a cached prefix block shared
// with other tokens changes the tokens. Expected tokens come from the closed form the stand-in
// implements, computed on the plain token lists. (The prefix cache's own cases:
// prefix_cache_test.cpp.)
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/hash.h"
#include "engine/block_allocator.h"
#include "engine/engine.h"
#include "engine/request_intake.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine_test_util.h"
#include "executor/step_executor.h"

namespace tpllama {
namespace {

using testing_util::OutputSide;

constexpr int kVocab = 64;
constexpr int kEos = 2;

Request token_request(int id, std::vector<int> prompt, int max_tokens) {
  Request r;
  r.id = id;
  r.line = static_cast<size_t>(id) + 1;
  r.token_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.logprobs = 0;  // the stand-in's logprob of a token is its id: the record then lists the tokens
  return r;
}

// A sequence as the engine admits it: its prompt tokens, a slot of `blocks`.
std::unique_ptr<Sequence> make_sequence(int id, int prompt_len, BlockAllocator& blocks,
                                        int max_tokens = 8) {
  std::vector<int> prompt(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i)
    prompt[static_cast<size_t>(i)] = 3 + (id * 7 + i) % (kVocab - 3);
  Request r = token_request(id, prompt, max_tokens);
  auto s = testing_util::make_sequence(r, std::vector<int32_t>(prompt.begin(), prompt.end()), 0,
                                       static_cast<uint64_t>(id));
  s->assign_slot(blocks.acquire_slot());
  return s;
}

// Takes s to `computed` positions in the KV cache and, with `sampled`, one more token pending: as
// a step and its token applied would (its blocks are the test's to reserve).
void advance(Sequence& s, int computed, int sampled = -1) {
  s.start_step(computed);
  s.end_step();
  if (sampled >= 0) s.append_token(sampled);
}

std::vector<int32_t> all_held(const BlockAllocator& blocks, int slots) {
  std::vector<int32_t> held;
  for (int s = 0; s < slots; ++s)
    held.insert(held.end(), blocks.table(s).begin(), blocks.table(s).end());
  return held;
}

TEST(BlockAllocator, HandsOutEachBlockOnceAndNoMoreThanItHas) {
  BlockAllocator blocks(/*n_blocks=*/10, /*block_size=*/4, /*max_slots=*/4);
  ActiveSequences active;
  for (int i = 0; i < 4; ++i) active.push_back(make_sequence(i, 16, blocks));
  std::vector<int> granted, missing;
  for (auto& s : active) {
    missing.push_back(blocks.shortfall(*s, 16));
    granted.push_back(blocks.reserve(*s, 16));  // the allocator never preempts
  }
  EXPECT_EQ(missing, (std::vector<int>{0, 0, 2, 4})) << "4 blocks each, of 10, 6, 2 and 0 left";
  std::vector<int32_t> held = all_held(blocks, 4);
  const std::set<int32_t> distinct(held.begin(), held.end());
  EXPECT_EQ(distinct.size(), held.size()) << "a block was handed out twice";
  EXPECT_EQ(held.size(), 10u);
  EXPECT_EQ(blocks.free_blocks(), 0);
  EXPECT_EQ(granted, (std::vector<int>{16, 16, 8, 0})) << "10 blocks of 4 positions";
  for (int32_t b : held) EXPECT_TRUE(b >= 0 && b < 10) << b;
}

TEST(Scheduler, PreemptsTheYoungestSequenceNotInFlight) {
  BlockAllocator blocks(6, 4, 4);
  Scheduler scheduler({64, 8, 4, 2}, blocks);
  ActiveSequences active;
  for (int i = 0; i < 4; ++i) active.push_back(make_sequence(i, 8, blocks));
  Sequence &oldest = *active[0], &second = *active[1], &third = *active[2], &youngest = *active[3];
  ASSERT_EQ(scheduler.reserve(second, 8, active), 8);
  ASSERT_EQ(scheduler.reserve(third, 8, active), 8);
  ASSERT_EQ(scheduler.reserve(youngest, 8, active), 8);
  advance(second, 8);
  advance(third, 8);
  youngest.start_step(8);  // the youngest is in flight: the next youngest gives way
  (void)blocks.take_changes();

  EXPECT_EQ(blocks.shortfall(oldest, 8), 2) << "6 blocks, 6 held";
  EXPECT_EQ(scheduler.reserve(oldest, 8, active), 8);
  EXPECT_EQ(scheduler.preemptions(), 1);
  EXPECT_TRUE(blocks.table(third.counts().slot).empty());
  EXPECT_EQ(third.counts().computed, 0) << "a preempted sequence computes its tokens again";
  EXPECT_EQ(third.state(), SequenceState::kPreempted);
  EXPECT_EQ(second.counts().computed, 8);
  EXPECT_EQ(blocks.table(youngest.counts().slot).size(), 2u);
  const std::vector<CacheOp> changes = blocks.take_changes();
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].slot, third.counts().slot);
  EXPECT_EQ(changes[0].block, CacheOp::kRelease)
      << "the release goes first: its blocks are then reused";
  EXPECT_EQ(changes[1].slot, oldest.counts().slot);
  EXPECT_TRUE(blocks.take_changes().empty());
}

TEST(Scheduler, NeverPreemptsAnOlderSequence) {
  BlockAllocator blocks(4, 4, 2);
  Scheduler scheduler({64, 8, 2, 1}, blocks);
  ActiveSequences active;
  active.push_back(make_sequence(0, 16, blocks));
  active.push_back(make_sequence(1, 16, blocks));
  ASSERT_EQ(scheduler.reserve(*active[0], 12, active), 12);
  EXPECT_EQ(scheduler.reserve(*active[1], 16, active), 4) << "only the one free block";
  EXPECT_EQ(scheduler.preemptions(), 0);
  EXPECT_EQ(blocks.table(active[0]->counts().slot).size(), 3u);
  EXPECT_EQ(scheduler.reserve(*active[1], 16, active), 4)
      << "nothing free, nobody younger: the block it holds";
  EXPECT_EQ(blocks.free_blocks(), 0);
}

TEST(BlockAllocator, SlotsGoLowestFirstAndTakeTheirBlocksBack) {
  BlockAllocator blocks(8, 2, 3);
  EXPECT_EQ(blocks.acquire_slot(), 0);
  EXPECT_EQ(blocks.acquire_slot(), 1);
  EXPECT_EQ(blocks.acquire_slot(), 2);
  EXPECT_THROW(blocks.acquire_slot(), Error);
  ActiveSequences active;
  auto s = testing_util::make_sequence(token_request(0, {5, 6, 7}, 4), {5, 6, 7});
  s->assign_slot(1);
  active.push_back(std::move(s));
  ASSERT_EQ(blocks.reserve(*active[0], 3), 3);
  EXPECT_EQ(blocks.free_blocks(), 6);
  blocks.release_slot(1);
  EXPECT_EQ(blocks.free_blocks(), 8);
  EXPECT_EQ(blocks.acquire_slot(), 1);
  blocks.release_slot(0);
  EXPECT_THROW(blocks.release_slot(0), Error) << "a free slot cannot be released";
}

TEST(Scheduler, DecodesGoFirstThenPrefillChunksWithinTheBudget) {
  BlockAllocator blocks(100, 4, 4);
  Scheduler scheduler({/*max_batch_tokens=*/10, /*max_logit_rows=*/8, /*max_seqs=*/4, /*groups=*/1},
                      blocks);
  ActiveSequences active;
  active.push_back(make_sequence(0, 25, blocks));  // a long prompt, admitted first
  active.push_back(make_sequence(1, 3, blocks));
  advance(*active[1], 3, 9);  // decoding: one token pending
  std::optional<StepPlan> plan = scheduler.schedule(active);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->batch.size(), 10u);
  EXPECT_EQ(plan->batch.slots[0], active[1]->counts().slot) << "the decode token leads the plan";
  EXPECT_EQ(plan->batch.positions[0], 3);
  for (size_t i = 1; i < 10; ++i)
    EXPECT_EQ(plan->batch.positions[i], static_cast<int>(i) - 1) << "a 9-token chunk";
  ASSERT_EQ(plan->batch.logit_rows.size(), 1u) << "an unfinished prefill chunk wants no logits";
  EXPECT_EQ(plan->batch.logit_rows[0], 0);
  EXPECT_EQ(active[0]->counts().scheduled, 9);
  EXPECT_FALSE(scheduler.schedule(active).has_value()) << "one group in flight at most";
}

// Sequences of random lengths and states: no plan exceeds the token budget, the logit rows or
// the sequences per group, and the groups in flight share no sequence and no KV slot.
TEST(Scheduler, PlansStayWithinTheLimitsAndGroupsInFlightAreDisjoint) {
  for (int groups : {1, 2, 3}) {
    for (int budget : {1, 7, 64}) {
      BlockAllocator blocks(400, 4, 12);
      const SchedulerLimits limits{budget, 5, 12, groups};
      Scheduler scheduler(limits, blocks);
      ActiveSequences active;
      for (int i = 0; i < 12; ++i) {
        active.push_back(make_sequence(i, 1 + (i * 37) % 50, blocks));
        if (i % 3 == 0) advance(*active.back(), active.back()->counts().prompt, 4);  // decoding
      }
      std::set<int> slots_in_flight;
      std::vector<int64_t> ids;
      while (std::optional<StepPlan> plan = scheduler.schedule(active)) {
        ids.push_back(plan->group);
        EXPECT_LE(static_cast<int>(plan->batch.size()), budget);
        EXPECT_LE(static_cast<int>(plan->batch.logit_rows.size()), limits.max_logit_rows);
        EXPECT_EQ(plan->sampling.size(), plan->batch.logit_rows.size());
        const std::set<int> slots(plan->batch.slots.begin(), plan->batch.slots.end());
        EXPECT_LE(static_cast<int>(slots.size()), (limits.max_seqs + groups - 1) / groups);
        for (int s : slots)
          EXPECT_TRUE(slots_in_flight.insert(s).second) << "slot " << s << " in two groups";
      }
      EXPECT_EQ(static_cast<int>(scheduler.in_flight()), groups) << "budget " << budget;
      for (size_t i = 0; i < ids.size(); ++i)
        EXPECT_EQ(scheduler.take_oldest().id, ids[i]) << "in planning order";
    }
  }
}

// A source of hand-made requests, and a sink that keeps what it is given.
class Requests : public RequestSource {
 public:
  explicit Requests(std::vector<Request> r) : requests_(r.begin(), r.end()) {}
  std::optional<Request> next(bool /*wait*/) override {
    if (requests_.empty()) return std::nullopt;
    Request r = std::move(requests_.front());
    requests_.pop_front();
    return r;
  }
  bool ended() const override { return requests_.empty(); }

 private:
  std::deque<Request> requests_;
};

class Collected : public ResultSink {
 public:
  void write(const Result& r) override { results.push_back(r); }
  std::vector<Result> results;
};

IntakeOptions intake_options(int context) {
  return {kVocab, context, 0};
}

TEST(RequestIntake, TurnsBadRequestsIntoErrorRecordsInOrder) {
  Request duplicate = token_request(0, {1, 5}, 4);
  duplicate.line = 3;
  Request outside = token_request(2, {1, kVocab}, 4);
  Request too_long = token_request(3, std::vector<int>(16, 5), 4);
  Requests source(
      {token_request(0, {1, 5, 6}, 4), token_request(1, {1, 7}, 4), duplicate, outside, too_long});
  RequestGate gate(source, nullptr, 16, nullptr);
  RequestIntake intake(gate, nullptr, intake_options(16));
  std::vector<Admission> got;
  while (std::optional<Admission> a = intake.next(true)) got.push_back(std::move(*a));
  ASSERT_EQ(got.size(), 5u);
  ASSERT_TRUE(got[0].sequence && got[1].sequence);
  EXPECT_EQ(got[0].sequence->counts().prompt, 3);
  EXPECT_EQ(got[1].order, 1u);
  for (size_t i = 2; i < 5; ++i) {
    ASSERT_TRUE(got[i].rejected.has_value()) << i;
    EXPECT_EQ(got[i].order, i) << "every record is numbered in input order";
    EXPECT_EQ(got[i].rejected->finish_reason, "error");
  }
  EXPECT_NE(got[2].rejected->error.find("duplicate id 0 (first on line 1)"), std::string::npos)
      << got[2].rejected->error;
  EXPECT_NE(got[3].rejected->error.find("token id 64 (element 1 of the prompt)"), std::string::npos)
      << got[3].rejected->error;
  EXPECT_NE(got[4].rejected->error.find("leaving no room to generate"), std::string::npos)
      << got[4].rejected->error;
  EXPECT_TRUE(intake.done());
}

TEST(RequestIntake, SkipsWhatTheOutputHoldsAndCountsTheRest) {
  ResumeIndex resume;
  resume.path = "out.jsonl";
  resume.done = {{"0", 1}, {"7", 2}};  // id 7 is no request of this input
  resume.by_id["0"] = {{1, false, 3}};
  Requests source({token_request(0, {1, 5, 6}, 4), token_request(1, {1, 7}, 4)});
  RequestGate gate(source, nullptr, 16, &resume);
  RequestIntake intake(gate, nullptr, intake_options(16));
  std::optional<Admission> first = intake.next(true);
  ASSERT_TRUE(first.has_value() && first->sequence) << "id 0 is answered in the output: id 1";
  EXPECT_EQ(first->sequence->request().id, 1);
  EXPECT_EQ(first->order, 0u) << "skipped requests take no record number";
  EXPECT_FALSE(intake.next(true).has_value());
  EXPECT_EQ(gate.skipped(), 1);
  EXPECT_EQ(gate.unmatched_records(), 2);
}

TEST(RequestIntake, RefusesAnOutputWhoseRecordHasAnotherTokenCount) {
  ResumeIndex resume;
  resume.path = "out.jsonl";
  resume.done = {{"0", 1}};
  resume.by_id["0"] = {
      {4, false, 9}};  // line 4 of the output says 9 prompt tokens; the request has 3
  Requests source({token_request(0, {1, 5, 6}, 4)});
  RequestGate gate(source, nullptr, 16, &resume);
  RequestIntake intake(gate, nullptr, intake_options(16));
  try {
    intake.next(true);
    FAIL() << "the other input's output was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 4 of out.jsonl answers id 0 for a 9-token prompt"),
              std::string::npos)
        << e.what();
  }
}

// truncate_prompt_tokens k keeps the prompt's last k tokens (-1: the context's), a scoring
// request's context losing what is cut; k past the context, or a cut into the continuation, is
// that request's error record.
TEST(RequestIntake, TruncatePromptTokensKeepsThePromptsLastTokens) {
  Request keep3 = token_request(0, {1, 5, 6, 7, 8}, 4);
  keep3.truncate_prompt_tokens = 3;
  Request short_one = token_request(1, {1, 5, 6}, 4);
  short_one.truncate_prompt_tokens = 5;
  Request to_context = token_request(2, std::vector<int>(20, 5), 4);
  to_context.truncate_prompt_tokens = -1;
  Request over = token_request(3, {1, 5}, 4);
  over.truncate_prompt_tokens = 17;
  Request score = token_request(4, {1, 5, 6, 7, 8, 9}, 1);
  score.scoring = true;
  score.n_context_tokens = 4;
  score.truncate_prompt_tokens = 4;
  Request no_context = score;
  no_context.id = 5;
  no_context.line = 6;
  no_context.n_context_tokens = 3;
  no_context.truncate_prompt_tokens = 3;
  Requests source({keep3, short_one, to_context, over, score, no_context});
  RequestGate gate(source, nullptr, 16, nullptr);
  RequestIntake intake(gate, nullptr, intake_options(16));
  std::vector<Admission> got;
  while (std::optional<Admission> a = intake.next(true)) got.push_back(std::move(*a));
  ASSERT_EQ(got.size(), 6u);
  ASSERT_TRUE(got[0].sequence && got[1].sequence && got[4].sequence);
  EXPECT_EQ(got[0].sequence->tokens(), (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(got[0].sequence->request().prompt_tokens_cut, 2);
  EXPECT_EQ(got[1].sequence->tokens(), (std::vector<int32_t>{1, 5, 6})) << "fewer than k: all";
  ASSERT_TRUE(got[2].rejected.has_value());
  EXPECT_NE(got[2].rejected->error.find(
                "prompt has 16 tokens (with BOS) but the context is 16 tokens, leaving no room to "
                "generate (truncate_prompt_tokens -1 kept them: give fewer)"),
            std::string::npos)
      << "-1 keeps the context's 16, leaving no room: " << got[2].rejected->error;
  ASSERT_TRUE(got[3].rejected.has_value());
  EXPECT_NE(got[3].rejected->error.find(
                "field 'truncate_prompt_tokens' is 17, more than the context of 16 tokens"),
            std::string::npos)
      << got[3].rejected->error;
  EXPECT_EQ(got[4].sequence->tokens(), (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(got[4].sequence->counts().context, 2) << "its context lost the 2 tokens cut";
  ASSERT_TRUE(got[5].rejected.has_value());
  EXPECT_NE(
      got[5].rejected->error.find("leaves no context before the 3 tokens of the continuation"),
      std::string::npos)
      << got[5].rejected->error;
}

TEST(Sequence, StopIdsMaxTokensAndTheContextFinishIt) {
  const StopRules rules{{kEos}, 8};
  OutputSide out(rules);
  auto stops = testing_util::make_sequence(token_request(0, {1, 5}, 10), {1, 5});
  out.take(out.open(*stops), 7);
  EXPECT_EQ(stops->state(), SequenceState::kRunning);
  out.take(*stops, kEos);
  EXPECT_STREQ(finish_reason_name(stops->finish_reason()), "stop");
  EXPECT_EQ(stops->counts().generated, 2) << "the stop id counts as generated";

  Request ignoring = token_request(1, {1, 5}, 3);
  ignoring.ignore_eos = true;
  auto length = testing_util::make_sequence(ignoring, {1, 5});
  out.open(*length);
  for (int t : {kEos, kEos}) out.take(*length, t);
  EXPECT_EQ(length->state(), SequenceState::kRunning) << "ignore_eos";
  out.take(*length, kEos);
  EXPECT_STREQ(finish_reason_name(length->finish_reason()), "length");

  auto context =
      testing_util::make_sequence(token_request(2, {1, 5, 5, 5, 5, 5}, 100), {1, 5, 5, 5, 5, 5});
  out.take(out.open(*context), 6);
  EXPECT_EQ(context->state(), SequenceState::kRunning);
  out.take(*context, 6);
  EXPECT_STREQ(finish_reason_name(context->finish_reason()), "length")
      << "prompt + completion reached the context of 8";
  EXPECT_EQ(out.record(*context).completion_tokens, 2);
}

// The stand-in "model": the next token after position p of a sequence is a hash of the tokens at
// positions [0, p] as read from its KV store through the slot's block table. closed_form gives the
// same from a plain token list.
int next_token(const std::vector<int32_t>& prefix) {
  Fnv1a h;
  h.add(prefix.data(), prefix.size() * sizeof(int32_t));
  return 3 + static_cast<int>(h.value() % (kVocab - 3));  // never BOS or EOS
}

std::vector<int> closed_form(std::vector<int32_t> tokens, int max_tokens, int context) {
  std::vector<int> out;
  while (static_cast<int>(out.size()) < max_tokens && static_cast<int>(tokens.size()) < context) {
    out.push_back(next_token(tokens));
    tokens.push_back(out.back());
  }
  return out;
}

// Executes plans as a pipeline of `depth` stages would: with one stage the tokens come back at
// once, with more when rank 0 asks for them, in order.
class StandIn : public StepExecutor {
 public:
  StandIn(int n_blocks, int block_size, int max_slots, int depth)
      : store_(static_cast<size_t>(n_blocks * block_size), -1),
        block_size_(block_size),
        tables_(static_cast<size_t>(max_slots)),
        depth_(depth) {}

  std::optional<SampledRows> submit(const StepPlan& plan) override {
    EXPECT_FALSE(shut_down_);
    for (const CacheOp& op : plan.cache_ops) {
      if (op.block == CacheOp::kRelease) {
        tables_.at(static_cast<size_t>(op.slot)).clear();
      } else {
        if (!sharing) {
          for (const auto& table : tables_)
            for (int32_t b : table)
              EXPECT_NE(b, op.block) << "block " << op.block << " given while held";
        }
        tables_.at(static_cast<size_t>(op.slot)).push_back(op.block);
      }
    }
    EXPECT_LE(static_cast<int>(plan.batch.size()), max_batch_tokens);
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      const int slot = plan.batch.slots[i], pos = plan.batch.positions[i];
      const int32_t block =
          tables_.at(static_cast<size_t>(slot)).at(static_cast<size_t>(pos / block_size_));
      EXPECT_EQ(holders(block), 1)
          << "block " << block << " written at position " << pos << " while shared";
      store_.at(row(slot, pos)) = plan.batch.tokens[i];
    }
    SampledRows rows;
    rows.group = plan.group;
    for (size_t i = 0; i < plan.batch.logit_rows.size(); ++i) {
      const size_t at = static_cast<size_t>(plan.batch.logit_rows[i]);
      const int slot = plan.batch.slots[at], pos = plan.batch.positions[at];
      std::vector<int32_t> prefix;
      for (int p = 0; p <= pos; ++p) prefix.push_back(store_.at(row(slot, p)));
      const int token = next_token(prefix);
      rows.tokens.push_back(token);
      if (plan.sampling[i].logprobs >= 0)
        rows.logprobs.push_back({static_cast<int32_t>(i), static_cast<float>(token), {}, {}});
    }
    ++steps;
    if (depth_ == 1) return rows;  // rank 0 is also the last stage
    held_.push_back(std::move(rows));
    return std::nullopt;
  }
  SampledRows receive_tokens(int64_t expected) override {
    EXPECT_FALSE(held_.empty());
    SampledRows rows = std::move(held_.front());
    held_.pop_front();
    EXPECT_EQ(rows.group, expected);
    return rows;
  }
  void shutdown() override { shut_down_ = true; }

  int steps = 0;
  int max_batch_tokens = 1 << 30;
  bool sharing =
      false;  // prefix caching: one block may sit in several tables, but is never written there

 private:
  int holders(int32_t block) const {
    int n = 0;
    for (const auto& table : tables_)
      n += static_cast<int>(std::count(table.begin(), table.end(), block));
    return n;
  }
  size_t row(int slot, int pos) const {
    const std::vector<int32_t>& table = tables_.at(static_cast<size_t>(slot));
    EXPECT_LT(static_cast<size_t>(pos / block_size_), table.size())
        << "position " << pos << " of slot " << slot;
    return static_cast<size_t>(table.at(static_cast<size_t>(pos / block_size_)) * block_size_ +
                               pos % block_size_);
  }

  std::vector<int32_t> store_;  // the token at each row of the KV pool
  int block_size_;
  std::vector<std::vector<int32_t>> tables_;
  int depth_;
  std::deque<SampledRows> held_;  // groups in flight
  bool shut_down_ = false;
};

struct LoopCase {
  int n_blocks, block_size, max_seqs, max_batch_tokens, groups;
  bool ordered;
  int shared_prefix = 0;  // tokens every prompt starts with (BOS included)
  bool prefix_caching = false;
};

// 24 requests of prompts of 1 to 40 tokens (after a shared prefix), 1 to 30 generated, through
// the whole engine loop.
std::vector<Result> run_loop(const LoopCase& c, RunSummary* summary) {
  LlamaConfig config;
  config.vocab_size = kVocab;
  config.max_seq_len = 64 + c.shared_prefix;
  std::vector<Request> requests;
  for (int i = 0; i < 24; ++i) {
    std::vector<int> prompt{1};
    for (int k = 1; k < c.shared_prefix; ++k) prompt.push_back(3 + (k * 11) % 50);
    for (int k = 1; k < 1 + (i * 13) % 40; ++k) prompt.push_back(3 + (i + k * 5) % 50);
    requests.push_back(token_request(i, prompt, 1 + (i * 7) % 30));
  }
  Requests source(requests);
  Collected sink;
  StandIn executor(c.n_blocks, c.block_size, c.max_seqs, c.groups);
  executor.max_batch_tokens = c.max_batch_tokens;
  executor.sharing = c.prefix_caching;
  EngineConfig o;
  o.prefix_caching = c.prefix_caching;
  o.max_seqs = c.max_seqs;
  o.max_batch_tokens = c.max_batch_tokens;
  o.groups = c.groups;
  o.context = config.max_seq_len;
  o.kv_block_size = c.block_size;
  o.kv_blocks = c.n_blocks;
  o.log_interval = 1e9;
  Engine engine(config, nullptr, executor, o);
  EngineIo io;
  io.reader = &source;
  io.writer = &sink;
  io.ordered = c.ordered;
  *summary = engine.run(io);
  EXPECT_GT(executor.steps, 0);
  for (const Result& r : sink.results) {
    const Request& q = requests.at(r.id.get<size_t>());
    const std::vector<int> expected =
        closed_form(std::vector<int32_t>(q.token_ids.begin(), q.token_ids.end()), q.max_tokens,
                    config.max_seq_len);
    EXPECT_EQ(r.finish_reason, "length") << r.error;
    EXPECT_TRUE(r.logprobs.has_value());
    std::vector<int> got;
    for (const TokenLogprob& t : r.logprobs.value_or(std::vector<TokenLogprob>{}))
      got.push_back(static_cast<int>(t.logprob));
    EXPECT_EQ(got, expected) << "request " << r.id;
    EXPECT_EQ(r.completion_tokens, static_cast<int>(expected.size()));
  }
  std::set<size_t> ids;
  for (const Result& r : sink.results)
    EXPECT_TRUE(ids.insert(r.id.get<size_t>()).second) << "twice: " << r.id;
  EXPECT_EQ(ids.size(), requests.size());
  if (c.ordered) {
    for (size_t i = 0; i < sink.results.size(); ++i) EXPECT_EQ(sink.results[i].id.get<size_t>(), i);
  }
  return sink.results;
}

TEST(EngineLoop, EveryRequestGetsTheClosedFormTokensOnce) {
  RunSummary s;
  run_loop({400, 16, 8, 64, 1, false}, &s);
  EXPECT_EQ(s.records.requests, 24);
  EXPECT_EQ(s.preemptions, 0);
}

TEST(EngineLoop, PreemptedSequencesComeBackWithTheSameTokens) {
  RunSummary s;
  run_loop({/*n_blocks=*/4, /*block_size=*/16, /*max_seqs=*/8, 64, 1, false},
           &s);  // one full context
  EXPECT_GT(s.preemptions, 0) << "the case must preempt to prove anything";
}

TEST(EngineLoop, GroupsInFlightChunkedPrefillAndOrderedOutput) {
  RunSummary s;
  run_loop({/*n_blocks=*/16, /*block_size=*/4, /*max_seqs=*/6, /*max_batch_tokens=*/5, /*groups=*/3,
            true},
           &s);
  EXPECT_GT(s.preemptions, 0);
  RunSummary two;
  run_loop({64, 8, 5, 7, 2, false}, &two);
}

TEST(EngineLoop, SharedPrefixesComeFromTheCacheWithTheSameTokens) {
  RunSummary s;
  run_loop({/*n_blocks=*/200, /*block_size=*/4, /*max_seqs=*/8, 64, 1, false, /*shared_prefix=*/21,
            true},
           &s);
  EXPECT_EQ(s.preemptions, 0);
  EXPECT_EQ(s.prefix.prompt_tokens, s.prompt_tokens);
  // 5 full blocks of the 21-token prefix for every request but the first: nearly 23 × 20 tokens.
  EXPECT_GE(s.prefix.hit_tokens, 23 * 20) << s.describe();
  RunSummary off;
  run_loop({200, 4, 8, 64, 1, false, 21, false}, &off);
  EXPECT_EQ(off.prefix.hit_tokens, 0);
}

TEST(EngineLoop, TheCacheSurvivesPreemptionGroupsInFlightAndChunkedPrefill) {
  RunSummary
      small;  // room for about two sequences: preemptions, evictions, recomputes from the cache
  run_loop({/*n_blocks=*/24, /*block_size=*/4, /*max_seqs=*/6, /*max_batch_tokens=*/9, /*groups=*/3,
            true, 21, true},
           &small);
  EXPECT_GT(small.preemptions, 0);
  EXPECT_GT(small.prefix.hit_tokens, 0);
  EXPECT_GT(small.prefix.evicted_blocks, 0);
  RunSummary two;
  run_loop({64, 8, 5, 7, 2, false, 17, true}, &two);
  EXPECT_GT(two.prefix.hit_tokens, 0);
}

}  // namespace
}  // namespace tpllama
