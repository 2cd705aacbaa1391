// ResultPublisher: rank 0's output side (vLLM v1's OutputProcessor). It owns each running
// sequence's OutputState and applies a group's row outcomes to them — text, stop strings and ids,
// max_tokens, logprobs, scores, the grammar's end — finishing the sequences these end; then it
// writes each finished request's record at once or, with --ordered, after every earlier one (a
// bounded buffer), each counted in the run's summary as it reaches the output, with the latency
// figures and each step's time.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "engine/output_state.h"
#include "engine/run_metrics.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "io/result_writer.h"
#include "text/tokenizer.h"

namespace tpllama {

class ResultPublisher {
 public:
  // ordered: write in input order, holding at most about reorder_limit results back. tokenizer
  // (null for token-id requests) detokenizes the completions; rules end them.
  ResultPublisher(ResultSink& sink, bool ordered, size_t reorder_limit,
                  const Tokenizer* tokenizer = nullptr, StopRules rules = {});

  // An admitted sequence's output starts (admitted: when its request was read).
  void open(const Sequence& s, Clock::time_point admitted);
  // A group's rows (Scheduler::apply): forked samples' outputs start from their parents', scored
  // rows are scored, sampled tokens detokenized and checked against the stops, max_tokens, the
  // context and, for a constrained sequence, its grammar (structured, which may be null when no
  // request is constrained); then the constrained ones' next masks are made. The sequences these
  // end are finished.
  void apply(const std::vector<RowOutcome>& rows, StructuredOutputs* structured);
  // The record of request number `order` (a rejected request's error record).
  void publish(uint64_t order, Result result);
  // The record of a finished sequence, with its latency figures; of a request of n samples, once
  // all n have finished (join_samples).
  void retire(Sequence& s);
  // Whether the reorder buffer has room for more requests to be admitted.
  bool has_room() const;

  // The pipeline was idle until now: the next step's time starts here.
  void start_step_clock() { step_mark_ = Clock::now(); }
  // A group's tokens came back: its time since the previous step's (or since start_step_clock).
  void step_done(const Group& group);

  // The end of the run: syncs the output and counts the results --ordered holds back unwritten.
  void finish();

  RunSummary& summary() { return summary_; }
  const RunSummary& summary() const { return summary_; }
  // Results of this run: written, or held back for --ordered.
  long long published() const { return published_; }

 private:
  // Counts each record as it reaches the output (with --ordered, that can be well after it
  // finished, or, after a stop, never).
  class CountingSink final : public ResultSink {
   public:
    CountingSink(ResultSink& inner, RunSummary& summary) : inner_(inner), summary_(summary) {}
    void write(const Result& r) override;
    void sync() override { inner_.sync(); }

   private:
    ResultSink& inner_;
    RunSummary& summary_;
  };

  OutputState& output(const Sequence& s);

  const Tokenizer* tokenizer_;
  StopRules rules_;
  std::unordered_map<const Sequence*, OutputState> outputs_;  // of the sequences running
  const Clock::time_point start_ =
      Clock::now();              // the run's start: when an offline batch's requests all arrive
  Clock::time_point step_mark_;  // end of the last timed step
  RunSummary summary_;
  CountingSink sink_;
  std::unique_ptr<OrderedResultWriter> ordered_;
  // The finished samples of requests of n samples, by record order, until the last finishes.
  struct Samples {
    std::vector<Result> results;  // by sample index
    int finished = 0;
  };
  std::unordered_map<uint64_t, Samples> samples_;
  size_t reorder_limit_;
  long long published_ = 0;
};

}  // namespace tpllama
