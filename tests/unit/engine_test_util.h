// Rank 0's engine parts wired as the Engine wires them, for tests that drive sequences by hand: a
// group's rows go through the Scheduler (the sequences' state) and then the ResultPublisher (their
// text, stops, scores and grammars), and a finished sequence's record comes from the publisher.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "engine/result_publisher.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/structured_outputs.h"

namespace tpllama::testing_util {

// A sequence of request r over `prompt` (its first n_context a scoring request's context).
inline std::unique_ptr<Sequence> make_sequence(const Request& r, std::vector<int32_t> prompt,
                                               int n_context = 0, uint64_t order = 0) {
  return std::make_unique<Sequence>(std::make_shared<const Request>(r), std::move(prompt),
                                    n_context, order);
}

// A sink that keeps what it is given.
class KeptResults : public ResultSink {
 public:
  void write(const Result& r) override { results.push_back(r); }
  std::vector<Result> results;
};

// The output side of rank 0: tokenizer (may be null) and rules as the Engine has them.
class OutputSide {
 public:
  explicit OutputSide(StopRules rules = {}, const Tokenizer* tokenizer = nullptr, int vocab = 0)
      : structured(tokenizer, vocab, rules),
        publisher(sink, /*ordered=*/false, /*reorder_limit=*/1, tokenizer, rules) {}

  // s was admitted: its output starts.
  Sequence& open(Sequence& s) {
    publisher.open(s, Clock::now());
    return s;
  }
  // s samples `token` as a step over its pending positions would bring it back.
  void take(Sequence& s, int token) {
    if (s.pending() > 0) {
      s.start_step(s.pending());
      s.end_step();
    }
    s.append_token(token);
    RowOutcome o;
    o.sequence = &s;
    o.token = token;
    publisher.apply({o}, &structured);
  }
  // A group's rows through the scheduler and then the outputs; the samples it forked.
  std::vector<Fork> apply(Scheduler& scheduler, const Group& group, const SampledRows& rows) {
    AppliedGroup applied = scheduler.apply(group, rows);
    publisher.apply(applied.rows, &structured);
    return std::move(applied.forks);
  }
  // The record of finished s (its output ends).
  Result record(Sequence& s) {
    EXPECT_EQ(s.state(), SequenceState::kFinished);
    const size_t before = sink.results.size();
    publisher.retire(s);
    structured.release(s);
    if (sink.results.size() == before) {
      ADD_FAILURE() << "no record came out: a request of n samples not all finished";
      return {};
    }
    return sink.results.back();
  }

  KeptResults sink;
  StructuredOutputs structured;
  ResultPublisher publisher;
};

}  // namespace tpllama::testing_util
