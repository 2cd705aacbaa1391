// A request of n samples on rank 0's side: the last prompt row asked for n times with each
// sample's own uniform, the forks sharing the prompt's blocks by reference, the shared partial
// block copied by whichever sample writes it first (and the copy made on every rank's KV cache),
// and the samples' records joined into one.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "engine/block_allocator.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine_test_util.h"
#include "io/result_writer.h"
#include "model/kv_cache.h"

namespace tpllama {
namespace {

using testing_util::OutputSide;

const StopRules kRules{{2}, 64};

std::unique_ptr<Sequence> request_of(std::vector<int32_t> prompt, int n, double temperature,
                                     uint64_t seed = 7, int max_tokens = 8) {
  Request r;
  r.token_ids.assign(prompt.begin(), prompt.end());
  r.max_tokens = max_tokens;
  r.n = n;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return testing_util::make_sequence(r, std::move(prompt));
}

// The prompt's step of a request of 3 samples over a 6-token prompt with blocks of 4: one group.
struct ForkedRequest {
  BlockAllocator blocks{16, 4, 4};
  Scheduler scheduler{{64, 8, 4, 1}, blocks};
  OutputSide out{kRules};
  ActiveSequences active;
  StepPlan plan;

  explicit ForkedRequest(double temperature, std::vector<int32_t> tokens = {20, 21, 22}) {
    active.push_back(request_of({1, 5, 6, 7, 8, 9}, 3, temperature));
    out.open(*active[0]);
    scheduler.admit(*active[0]);
    plan = *scheduler.schedule(active);
    SampledRows rows;
    rows.group = plan.group;
    rows.tokens = std::move(tokens);
    std::vector<Fork> forks = out.apply(scheduler, scheduler.take_oldest(), rows);
    EXPECT_EQ(forks.size(), 2u);
    scheduler.adopt(std::move(forks), active);
  }
};

TEST(Samples, TheLastPromptRowIsAskedForOncePerSampleWithEachOnesUniform) {
  ForkedRequest f(/*temperature=*/0.8);
  ASSERT_EQ(f.plan.batch.size(), 6u) << "the prompt is computed once";
  EXPECT_EQ(f.plan.batch.logit_rows, (std::vector<int32_t>{5, 5, 5}));
  ASSERT_EQ(f.plan.sampling.size(), 3u);
  // Sample k draws from splitmix64(seed ^ k * gamma); sample 0 from the seed itself.
  for (uint64_t k = 0; k < 3; ++k) {
    Rng stream(k == 0 ? 7 : splitmix64(7 ^ (k * kSplitmix64Gamma)));
    EXPECT_EQ(f.plan.sampling[k].uniform, stream.uniform()) << "sample " << k;
  }
  EXPECT_NE(f.plan.sampling[1].uniform, f.plan.sampling[2].uniform);
}

TEST(Samples, ForksShareThePromptBlocksAndEachGetsItsRowsToken) {
  ForkedRequest f(/*temperature=*/0.0);
  ASSERT_EQ(f.active.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const Sequence& s = *f.active[static_cast<size_t>(k)];
    EXPECT_EQ(s.counts().sample, k);
    EXPECT_EQ(s.tokens(), (std::vector<int32_t>{1, 5, 6, 7, 8, 9, 20 + k}));
    EXPECT_EQ(s.counts().computed, 6);
    EXPECT_EQ(s.pending(), 1);
    EXPECT_EQ(s.counts().forks_left, 0);
    EXPECT_EQ(f.blocks.table(s.counts().slot), f.blocks.table(f.active[0]->counts().slot));
  }
  const std::vector<int32_t> shared = f.blocks.table(f.active[0]->counts().slot);
  ASSERT_EQ(shared.size(), 2u);
  for (int32_t b : shared) EXPECT_EQ(f.blocks.references(b), 3);
  // Every rank learns the forks' tables from the next plan: the same blocks appended.
  const std::vector<CacheOp> ops = f.blocks.take_changes();
  int appended = 0;
  for (const CacheOp& op : ops)
    if (op.slot != f.active[0]->counts().slot && op.replaces < 0) ++appended;
  EXPECT_EQ(appended, 4);
}

TEST(Samples, TheSharedPartialBlockIsCopiedByEachWriterButTheLast) {
  ForkedRequest f(/*temperature=*/0.0);
  f.blocks.take_changes();
  const int32_t partial =
      f.blocks.table(f.active[0]->counts().slot)[1];  // positions 4..7, 4 and 5 set
  // The next decode step of all three: position 6 goes into the shared block.
  std::optional<StepPlan> step = f.scheduler.schedule(f.active);
  ASSERT_TRUE(step.has_value());
  ASSERT_EQ(step->batch.size(), 3u);
  std::vector<CacheOp> copies;
  for (const CacheOp& op : step->cache_ops)
    if (op.replaces >= 0) copies.push_back(op);
  ASSERT_EQ(copies.size(), 2u) << "the first two writers copy; the last writes in place";
  for (const CacheOp& op : copies) {
    EXPECT_EQ(op.replaces, 1);
    EXPECT_NE(op.block, partial);
  }
  EXPECT_EQ(f.blocks.references(partial), 1);
  EXPECT_EQ(f.blocks.references(f.blocks.table(f.active[0]->counts().slot)[0]), 3)
      << "the full first block stays shared";
  SampledRows rows;
  rows.group = step->group;
  rows.tokens = {2, 2, 2};  // EOS
  (void)f.out.apply(f.scheduler, f.scheduler.take_oldest(), rows);
  for (auto& s : f.active) {
    EXPECT_EQ(s->finish_reason(), FinishReason::kStop);
    f.scheduler.retire(*s);
  }
  EXPECT_EQ(f.blocks.free_blocks(), 16);
}

TEST(Samples, ASampleItsFirstTokenFinishesTakesNoSlot) {
  ForkedRequest f(/*temperature=*/0.0, {20, 2, 22});  // 2: EOS
  ASSERT_EQ(f.active.size(), 3u);
  const Sequence& done = *f.active[1];
  EXPECT_EQ(done.counts().sample, 1);
  EXPECT_EQ(done.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(done.counts().slot, -1);
  for (int32_t b : f.blocks.table(f.active[0]->counts().slot)) EXPECT_EQ(f.blocks.references(b), 2);
  for (auto& s : f.active) f.scheduler.retire(*s);
  EXPECT_EQ(f.blocks.free_blocks(), 16);
}

// Rows that are not finite: the samples are forked all the same and each fails (the record is
// the first failure); a request that fails on a scored prompt row never reaches its sampled rows
// and forks none (it alone is the record).
TEST(Samples, ANonFiniteRowFailsEverySampleOrForksNone) {
  ForkedRequest f(/*temperature=*/0.8, {kNonFiniteRow, kNonFiniteRow, kNonFiniteRow});
  ASSERT_EQ(f.active.size(), 3u);
  for (const auto& s : f.active) EXPECT_EQ(s->finish_reason(), FinishReason::kError);
  EXPECT_EQ(f.active[0]->counts().forks_left, 0);

  BlockAllocator blocks(16, 4, 4);
  Scheduler scheduler({64, 8, 4, 1}, blocks);
  OutputSide out(kRules);
  ActiveSequences active;
  Request r;
  r.token_ids = {1, 5, 6, 7};
  r.n = 3;
  r.prompt_logprobs = 0;
  active.push_back(testing_util::make_sequence(r, {r.token_ids.begin(), r.token_ids.end()}));
  out.open(*active[0]);
  scheduler.admit(*active[0]);
  StepPlan plan = *scheduler.schedule(active);
  ASSERT_EQ(plan.sampling.size(), 6u) << "three scored positions, then three samples";
  SampledRows rows;
  rows.group = plan.group;
  rows.tokens = {kNonFiniteRow, 6, 7, 9, 9, 9};
  rows.logprobs = {{1, -1.0f, {}, {}, 1}, {2, -1.0f, {}, {}, 1}};
  EXPECT_TRUE(out.apply(scheduler, scheduler.take_oldest(), rows).empty());
  EXPECT_EQ(active[0]->finish_reason(), FinishReason::kError);
  EXPECT_EQ(active[0]->counts().forks_left, 2) << "its samples were never forked";
}

TEST(Samples, ACopyNeedsAFreeBlockOrItWaits) {
  // Two blocks in all, both the prompt's: a fork cannot copy the partial one.
  BlockAllocator blocks(2, 4, 2);
  Scheduler scheduler({64, 8, 2, 1}, blocks);
  ActiveSequences active;
  active.push_back(request_of({1, 5, 6, 7, 8, 9}, 2, 0.0));
  OutputSide out(kRules);
  out.open(*active[0]);
  scheduler.admit(*active[0]);
  StepPlan plan = *scheduler.schedule(active);
  SampledRows rows;
  rows.group = plan.group;
  rows.tokens = {20, 21};
  scheduler.adopt(out.apply(scheduler, scheduler.take_oldest(), rows), active);
  EXPECT_EQ(blocks.shortfall(*active[1], 1), 1);
  EXPECT_EQ(blocks.reserve(*active[1], 1), 0);
}

TEST(Samples, EveryRankCopiesTheReplacedBlocksKeysAndValues) {
  KvCache cache(/*layers=*/2, /*kv_dim=*/3, /*block_size=*/4, /*blocks=*/4, /*slots=*/2);
  cache.append_block(0, 1);
  cache.append_block(0, 2);
  for (int layer = 0; layer < 2; ++layer)
    for (const Tensor& pool : {cache.key_pool(layer), cache.value_pool(layer)}) {
      auto* p = static_cast<float*>(pool.data());
      for (int i = 0; i < 16 * 3; ++i) p[i] = static_cast<float>(1000 * layer + i);
    }
  cache.replace_block(0, 1, 3);
  EXPECT_EQ(cache.blocks(0), (std::vector<int32_t>{1, 3}));
  for (int layer = 0; layer < 2; ++layer)
    for (const Tensor& pool : {cache.key_pool(layer), cache.value_pool(layer)}) {
      const auto* p = static_cast<const float*>(pool.data());
      for (int i = 0; i < 4 * 3; ++i)
        EXPECT_EQ(p[3 * 12 + i], static_cast<float>(1000 * layer + 2 * 12 + i))
            << "layer " << layer << " element " << i;
    }
  EXPECT_THROW(cache.replace_block(0, 2, 0), Error) << "the table has no block 2";
}

TEST(Samples, TheRecordHoldsEachSampleAsAChoiceAndThePromptOnce) {
  std::vector<Result> samples(3);
  for (int k = 0; k < 3; ++k) {
    Result& r = samples[static_cast<size_t>(k)];
    r.id = "q";
    r.prompt_tokens = 5;
    r.text = "text " + std::to_string(k);
    r.completion_tokens = k + 1;
    r.finish_reason = k == 1 ? "stop" : "length";
  }
  samples[1].stop_reason = "\n";
  const Result joined = join_samples(samples);
  EXPECT_EQ(joined.prompt_tokens, 5);
  EXPECT_EQ(joined.completion_tokens, 6);
  const auto line = nlohmann::ordered_json::parse(result_to_json_line(joined));
  const nlohmann::ordered_json expected = nlohmann::ordered_json::parse(R"({"id":"q","choices":[
      {"index":0,"text":"text 0","completion_tokens":1,"finish_reason":"length"},
      {"index":1,"text":"text 1","completion_tokens":2,"finish_reason":"stop","stop_reason":"\n"},
      {"index":2,"text":"text 2","completion_tokens":3,"finish_reason":"length"}],
      "prompt_tokens":5,"completion_tokens":6})");
  EXPECT_EQ(line, expected);
  const auto batch =
      nlohmann::json::parse(result_to_json_line(joined, OutputFormat::kOpenAiBatch, {"m", "fp_1"}));
  const nlohmann::json& body = batch["response"]["body"];
  ASSERT_EQ(body["choices"].size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(body["choices"][k]["index"], k);
    EXPECT_EQ(body["choices"][k]["text"], "text " + std::to_string(k));
  }
  EXPECT_EQ(body["usage"], nlohmann::json::parse(
                               R"({"prompt_tokens":5,"completion_tokens":6,"total_tokens":11})"));
  // A failed sample makes the request an error record, naming the sample.
  samples[2].finish_reason = "error";
  samples[2].error = "not finite";
  const Result failed = join_samples(samples);
  EXPECT_EQ(failed.finish_reason, "error");
  EXPECT_EQ(failed.error, "sample 2: not finite");
  EXPECT_TRUE(failed.choices.empty());
}

}  // namespace
}  // namespace tpllama
