// ResultPublisher: rank 0's finished requests, written at once or, with --ordered, after every
// earlier one (a bounded buffer), each counted in the run's summary as it reaches the output, with
// the latency figures and each step's time.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/clock.h"

#include "io/result_writer.h"
#include "runtime/run_metrics.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"

namespace tpllama {

class ResultPublisher {
 public:
  // ordered: write in input order, holding at most about reorder_limit results back.
  ResultPublisher(ResultSink& sink, bool ordered, size_t reorder_limit);

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
