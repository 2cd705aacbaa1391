// Writing, counting and timing rank 0's results.
#include "runtime/result_publisher.h"

#include <utility>

namespace tpllama {

void ResultPublisher::CountingSink::write(const Result& r) {
  inner_.write(r);
  RecordCounts& n = summary_.records;
  ++n.requests;
  if (r.finish_reason == finish_reason_name(FinishReason::kError))
    ++n.errors;
  else if (r.score)
    ++n.scored;
  else
    (r.finish_reason == finish_reason_name(FinishReason::kStop) ? n.finished_stop
                                                                : n.finished_length)++;
}

ResultPublisher::ResultPublisher(ResultSink& sink, bool ordered, size_t reorder_limit)
    : sink_(sink, summary_), reorder_limit_(reorder_limit) {
  if (ordered) ordered_ = std::make_unique<OrderedResultWriter>(sink_);
}

void ResultPublisher::publish(uint64_t order, Result result) {
  ++published_;
  if (ordered_)
    ordered_->submit(order, std::move(result));
  else
    sink_.write(result);
}

void ResultPublisher::retire(Sequence& s) {
  const auto now = Clock::now();
  const int generated = s.n_generated();
  summary_.generated_tokens += generated;
  RequestLatencies& l = summary_.latency;
  const bool first_sample = s.sample_index() == 0;  // a request's time to first token, once
  if (generated > 0 && first_sample) l.ttft.add(seconds_between(s.admitted(), s.first_token()));
  if (generated > 1) l.tpot.add(seconds_between(s.first_token(), now) / (generated - 1));
  if (generated > 0 && first_sample)
    l.ttft_from_start.add(seconds_between(start_, s.first_token()));
  // A first sample that failed before its last prompt position's step came back forked none: it
  // is the whole record.
  const int n = s.samples_to_fork() > 0 ? 1 : s.request.n;
  if (s.request.n == 1) {
    l.latency_from_start.add(seconds_between(start_, now));
    publish(s.order, s.take_result());
    return;
  }
  // A request of n samples: one record, once the last of them finishes.
  Samples& samples = samples_[s.order];
  samples.results.resize(static_cast<size_t>(n));
  samples.results[static_cast<size_t>(s.sample_index())] = s.take_result();
  if (++samples.finished < n) return;
  l.latency_from_start.add(seconds_between(start_, now));
  Result joined = join_samples(std::move(samples.results));
  samples_.erase(s.order);
  publish(s.order, std::move(joined));
}

bool ResultPublisher::has_room() const {
  return !ordered_ || ordered_->buffered() < reorder_limit_;
}

void ResultPublisher::step_done(const Group& group) {
  const auto now = Clock::now();
  const double dt = seconds_between(step_mark_, now);
  step_mark_ = now;
  StepPhases& p = summary_.phases;
  if (group.prefill_tokens > 0) {
    p.prefill_seconds += dt;
    p.prefill_step_tokens += group.prefill_tokens;
  } else {
    p.decode_seconds += dt;
    p.decode_step_tokens += group.decode_tokens;
    p.decode_context_tokens += group.decode_context;
    ++p.decode_steps;
  }
}

void ResultPublisher::finish() {
  sink_.sync();
  if (ordered_) summary_.unwritten = static_cast<long long>(ordered_->buffered());
  summary_.seconds = seconds_between(start_, Clock::now());
}

}  // namespace tpllama
