// The step protocol (Pipeline) on ranks that are threads of this process, over ThreadComm
// (thread_comm.h): stories260K split over stages, and over TP ranks within them, gives run.c's
// greedy tokens and text (the shipped reference_greedy.jsonl), whether rank 0 drives it with
// hand-made plans, one group per stage in flight, or with the Engine as Session::serve() does.
#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "executor/pipeline.h"
#include "model/checkpoint.h"
#include "model/kv_cache.h"
#include "model/llama2c.h"
#include "model/llama_model.h"
#include "model/model_text.h"
#include "test_util.h"
#include "thread_comm.h"

namespace tpllama {
namespace {

using testing_util::ThreadComm;
using testing_util::ThreadNet;

constexpr int kBlockSize = 16;
constexpr int kBlocks = 128;  // four sequences of up to 347 positions (22 blocks each), and spare
constexpr int kMaxSeqs = 4;
constexpr int kMaxBatchTokens = 16;
constexpr int kPrefillChunk = 3;  // hand-made plans: prompts over several steps, some with no row

// One record of reference_greedy.jsonl: run.c's greedy generation from stories260K.bin.
struct Reference {
  std::string prompt, output;
  std::vector<int32_t> prompt_tokens, generated_tokens;
  bool stopped_on_bos = false;
};

struct Layout {
  int tp, pp;
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << "tp " << l.tp << " x pp " << l.pp;
}

// Every rank's communicators, as make_rank_communicators() makes them from MPI: the world, the TP
// group of each stage, and each TP rank's column through the stages.
struct Communicators {
  ThreadNet net;
  std::vector<std::unique_ptr<ThreadComm>> world, tp, stage;  // by world rank

  explicit Communicators(const Layout& l) {
    const int n = l.tp * l.pp, world_group = net.add_group(n);
    std::vector<int> tp_groups, stage_groups;
    for (int p = 0; p < l.pp; ++p) tp_groups.push_back(net.add_group(l.tp));
    for (int t = 0; t < l.tp; ++t) stage_groups.push_back(net.add_group(l.pp));
    for (int r = 0; r < n; ++r) {
      const int tp_rank = r % l.tp, pp_rank = r / l.tp;
      world.push_back(std::make_unique<ThreadComm>(net, world_group, r));
      tp.push_back(
          std::make_unique<ThreadComm>(net, tp_groups[static_cast<size_t>(pp_rank)], tp_rank));
      stage.push_back(
          std::make_unique<ThreadComm>(net, stage_groups[static_cast<size_t>(tp_rank)], pp_rank));
    }
  }
};

// One rank: its shard of the model, its KV cache and its end of the pipeline (made on the rank's
// own thread: connecting the stages is a message).
struct Rank {
  Checkpoint checkpoint;
  Topology topology;
  LlamaModel model;
  KvCache cache;
  Pipeline pipeline;

  Rank(const std::string& dir, const Layout& l, int rank, Communicators& c)
      : checkpoint(dir),
        topology(l.tp * l.pp, rank, l.tp, l.pp, checkpoint.config().n_layers),
        model(checkpoint, topology, *c.tp[static_cast<size_t>(rank)], DeviceContext{},
              ModelLimits{kMaxBatchTokens, max_logit_rows(kMaxSeqs, kMaxBatchTokens)}),
        cache(model.n_layers_local(), model.kv_dim_local(), kBlockSize, kBlocks, kMaxSeqs),
        pipeline(model, cache, topology, *c.tp[static_cast<size_t>(rank)],
                 *c.stage[static_cast<size_t>(rank)], *c.world[static_cast<size_t>(rank)]) {}
};

// A sequence as rank 0's hand-made scheduler holds it: a slot of its own, blocks handed out from
// the top of the pool down (so no table is contiguous), the prompt fed kPrefillChunk tokens a step.
struct HandSequence {
  int slot = 0;
  std::vector<int32_t> prompt;
  size_t max_tokens = 0;
  int computed = 0;  // positions in the KV cache
  int blocks = 0;
  std::vector<int32_t> generated;
  bool done() const { return generated.size() >= max_tokens; }
};

// Rank 0's loop: a plan per group of sequences, each group's next plan made once its tokens are
// back, pp groups in flight, then the shutdown.
class HandDriver {
 public:
  HandDriver(Pipeline& pipeline, std::vector<HandSequence>& sequences, int groups)
      : pipeline_(pipeline), groups_(static_cast<size_t>(groups)) {
    for (size_t i = 0; i < sequences.size(); ++i)
      groups_[i % groups_.size()].push_back(&sequences[i]);
  }

  void run() {
    std::deque<InFlight> in_flight;
    for (size_t g = 0; g < groups_.size(); ++g) submit(g, in_flight);
    while (!in_flight.empty()) {
      InFlight oldest = std::move(in_flight.front());
      in_flight.pop_front();
      apply(oldest, pipeline_.receive_tokens(oldest.plan_group));
      submit(oldest.group, in_flight);
    }
    pipeline_.shutdown();
  }

 private:
  struct InFlight {
    size_t group = 0;
    int64_t plan_group = 0;
    std::vector<HandSequence*> rows;  // the sequence of each logit row
  };

  // The group's next plan, unless all its sequences are done; tokens that come back at once (a
  // single stage) are applied here.
  void submit(size_t g, std::deque<InFlight>& in_flight) {
    StepPlan plan;
    plan.group = next_plan_group_++;
    InFlight f{g, plan.group, {}};
    for (HandSequence* s : groups_[g]) {
      if (s->done()) {
        if (s->blocks > 0) plan.cache_ops.push_back({s->slot, CacheOp::kRelease});
        s->blocks = 0;
        continue;
      }
      const int prompt = static_cast<int>(s->prompt.size());
      std::vector<int32_t> tokens;
      if (s->computed < prompt)
        tokens.assign(s->prompt.begin() + s->computed,
                      s->prompt.begin() + std::min(prompt, s->computed + kPrefillChunk));
      else
        tokens.push_back(s->generated.back());
      for (const int32_t token : tokens) {
        while (s->blocks * kBlockSize <= s->computed) {
          plan.cache_ops.push_back({s->slot, next_block_--});
          ++s->blocks;
        }
        plan.batch.tokens.push_back(token);
        plan.batch.positions.push_back(s->computed++);
        plan.batch.slots.push_back(s->slot);
      }
      if (s->computed >= prompt) {  // the prompt is in: this step's last row makes a token
        plan.batch.logit_rows.push_back(static_cast<int32_t>(plan.batch.tokens.size()) - 1);
        plan.sampling.push_back(RowSampling{});  // temperature 0: greedy
        f.rows.push_back(s);
      }
    }
    if (plan.batch.tokens.empty()) return;
    if (std::optional<SampledRows> rows = pipeline_.submit(plan)) {
      apply(f, *rows);
      submit(g, in_flight);
    } else {
      in_flight.push_back(std::move(f));
    }
  }

  static void apply(const InFlight& f, const SampledRows& rows) {
    ASSERT_EQ(rows.group, f.plan_group);
    ASSERT_EQ(rows.tokens.size(), f.rows.size());
    for (size_t i = 0; i < f.rows.size(); ++i) f.rows[i]->generated.push_back(rows.tokens[i]);
  }

  Pipeline& pipeline_;
  std::vector<std::vector<HandSequence*>> groups_;
  int64_t next_plan_group_ = 0;
  int32_t next_block_ = kBlocks - 1;
};

// A source of ready requests and a sink that keeps the results.
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

class PipelineInThreads : public ::testing::TestWithParam<Layout> {
 protected:
  static void SetUpTestSuite() {
    stories_ = testing_util::stories_dir();
    if (stories_.empty()) return;
    dir_ = testing_util::fresh_dir("pipeline_threads");
    convert_llama2c(stories_ + "/stories260K.bin",
                    ConvertOptions{dir_, stories_ + "/tok512.model", DType::kF32});
    references_.clear();
    std::ifstream in(stories_ + "/reference_greedy.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      references_.push_back({j["prompt"].get<std::string>(), j["output"].get<std::string>(),
                             j["prompt_tokens"].get<std::vector<int32_t>>(),
                             j["generated_tokens"].get<std::vector<int32_t>>(),
                             j["stopped_on_bos"].get<bool>()});
    }
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (stories_.empty()) GTEST_FAIL() << shipped::kStoriesMissing;
    ASSERT_EQ(references_.size(), 4u);
  }

  // Makes every rank of the layout on its own thread; rank 0 runs `drive`, every other rank
  // serves plans until the shutdown. Fails the test with each rank's error, and unless every rank
  // ran every step and every message sent was received.
  void run_layout(const Layout& l, const std::function<void(Pipeline&)>& drive) {
    Communicators c(l);
    const int n = l.tp * l.pp;
    std::vector<long long> steps(static_cast<size_t>(n), -1);
    const std::vector<std::string> errors = testing_util::run_ranks(c.net, n, [&](int r) {
      Rank rank(dir_, l, r, c);
      if (r == 0)
        drive(rank.pipeline);
      else
        rank.pipeline.serve();
      steps[static_cast<size_t>(r)] = rank.pipeline.stats().steps;
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_GT(steps[0], 0);
    for (int r = 1; r < n; ++r)
      EXPECT_EQ(steps[static_cast<size_t>(r)], steps[0]) << "rank " << r << " ran every plan";
    EXPECT_EQ(c.net.undelivered(), 0);
    if (l.tp > 1) {  // the TP ranks really split the work: their layers all-reduced
      EXPECT_GT(c.tp[0]->stats().all_reduce_calls, 0);
    }
    if (l.pp > 1) {
      EXPECT_GT(c.stage[0]->stats().p2p_calls, 0) << "hidden states went down the stages";
    }
  }

  static inline std::string stories_, dir_;
  static inline std::vector<Reference> references_;
};

// run.c's tokens, the stopping BOS included, from rank 0's own plans: prompts prefilled a few
// tokens a step, one group per stage in flight, blocks released as sequences finish.
TEST_P(PipelineInThreads, HandMadePlansGiveRunCsGreedyTokens) {
  const Layout l = GetParam();
  std::vector<HandSequence> sequences;
  for (size_t i = 0; i < references_.size(); ++i) {
    HandSequence s;
    s.slot = static_cast<int>(i);
    s.prompt = references_[i].prompt_tokens;
    s.max_tokens = references_[i].generated_tokens.size() + (references_[i].stopped_on_bos ? 1 : 0);
    sequences.push_back(std::move(s));
  }
  run_layout(l, [&](Pipeline& pipeline) { HandDriver(pipeline, sequences, l.pp).run(); });
  for (size_t i = 0; i < references_.size(); ++i) {
    std::vector<int32_t> expected = references_[i].generated_tokens;
    if (references_[i].stopped_on_bos) expected.push_back(1);
    EXPECT_EQ(sequences[i].generated, expected) << "record " << i << ": " << references_[i].prompt;
  }
}

// A grammar mask through the layout: of two rows over run.c's first prompt, the one masked to a
// single token (in the upper half of the vocabulary: another TP rank's slice) takes it, and the one
// beside it, unmasked, takes run.c's greedy token.
TEST_P(PipelineInThreads, AMaskedRowTakesItsOnlyAllowedToken) {
  const Layout l = GetParam();
  const std::vector<int32_t>& prompt = references_[0].prompt_tokens;
  const int32_t only = 500;
  ASSERT_NE(references_[0].generated_tokens[0], only);
  std::vector<int32_t> got;
  run_layout(l, [&](Pipeline& pipeline) {
    StepPlan plan;
    for (int slot = 0; slot < 2; ++slot) {
      plan.cache_ops.push_back({slot, slot});
      for (size_t p = 0; p < prompt.size(); ++p) {
        plan.batch.tokens.push_back(prompt[p]);
        plan.batch.positions.push_back(static_cast<int32_t>(p));
        plan.batch.slots.push_back(slot);
      }
      plan.batch.logit_rows.push_back(static_cast<int32_t>(plan.batch.tokens.size()) - 1);
      plan.sampling.push_back(RowSampling{});
    }
    plan.masks.width = (512 + 31) / 32;
    plan.masks.rows = {0};
    plan.masks.words.assign(static_cast<size_t>(plan.masks.width), 0);
    plan.masks.words[only / 32] = 1u << (only % 32);
    std::optional<SampledRows> rows = pipeline.submit(plan);
    got = (rows ? *rows : pipeline.receive_tokens(plan.group)).tokens;
    pipeline.shutdown();
  });
  EXPECT_EQ(got, (std::vector<int32_t>{only, references_[0].generated_tokens[0]}));
}

// The Engine on rank 0 with the Pipeline as its executor, as Session::serve() runs them: run.c's
// text for every prompt, ending at its step count or at the BOS that ends a story.
TEST_P(PipelineInThreads, TheEngineOverThePipelineWritesRunCsText) {
  const Layout l = GetParam();
  std::vector<Request> requests;
  for (size_t i = 0; i < references_.size(); ++i) {
    Request r;
    r.id = i;
    r.line = i + 1;
    r.prompt = references_[i].prompt;
    r.max_tokens = static_cast<int>(references_[i].generated_tokens.size()) +
                   (references_[i].stopped_on_bos ? 1 : 0);
    requests.push_back(std::move(r));
  }
  Requests source(requests);
  Collected sink;
  RunSummary summary;
  run_layout(l, [&](Pipeline& pipeline) {
    const Checkpoint checkpoint(dir_);
    const ModelText text(dir_, checkpoint.config());
    EngineConfig o;
    o.max_seqs = kMaxSeqs;
    o.max_batch_tokens = kMaxBatchTokens;
    o.log_interval = 1e9;
    o.groups = l.pp;
    o.context = checkpoint.config().max_seq_len;
    o.kv_block_size = kBlockSize;
    o.kv_blocks = kBlocks;
    o.max_logit_rows = max_logit_rows(kMaxSeqs, kMaxBatchTokens);
    EngineIo io;
    io.reader = &source;
    io.writer = &sink;
    summary = Engine(checkpoint.config(), &text, pipeline, o).run(io);
  });
  ASSERT_EQ(sink.results.size(), references_.size());
  for (const Result& r : sink.results) {
    const Reference& ref = references_.at(r.id.get<size_t>());
    EXPECT_EQ(r.text, ref.output.substr(ref.prompt.size())) << "record " << r.id;
    EXPECT_EQ(r.finish_reason, ref.stopped_on_bos ? "stop" : "length") << "record " << r.id;
    EXPECT_EQ(r.prompt_tokens, static_cast<int>(ref.prompt_tokens.size())) << "record " << r.id;
  }
  EXPECT_GT(summary.steps, 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, PipelineInThreads,
                         ::testing::Values(Layout{1, 2}, Layout{1, 3}, Layout{2, 2}),
                         [](const auto& param_info) {
                           return "tp" + std::to_string(param_info.param.tp) + "_pp" +
                                  std::to_string(param_info.param.pp);
                         });

}  // namespace
}  // namespace tpllama
