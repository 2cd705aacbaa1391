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
  if (generated > 0) l.ttft.add(seconds_between(s.admitted(), s.first_token()));
  if (generated > 1) l.tpot.add(seconds_between(s.first_token(), now) / (generated - 1));
  if (generated > 0) l.ttft_from_start.add(seconds_between(start_, s.first_token()));
  l.latency_from_start.add(seconds_between(start_, now));
  publish(s.order, s.take_result());
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
