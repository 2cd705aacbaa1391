// Writing, counting and timing rank 0's results.
#include "engine/result_publisher.h"

#include <utility>

#include "core/error.h"
#include "engine/structured_outputs.h"

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

ResultPublisher::ResultPublisher(ResultSink& sink, bool ordered, size_t reorder_limit,
                                 const Tokenizer* tokenizer, StopRules rules)
    : tokenizer_(tokenizer),
      rules_(std::move(rules)),
      sink_(sink, summary_),
      reorder_limit_(reorder_limit) {
  if (ordered) ordered_ = std::make_unique<OrderedResultWriter>(sink_);
}

void ResultPublisher::open(const Sequence& s, Clock::time_point admitted) {
  outputs_.insert_or_assign(&s, OutputState(s.request(), tokenizer_, s.tokens(), admitted));
}

OutputState& ResultPublisher::output(const Sequence& s) {
  const auto it = outputs_.find(&s);
  TPLLAMA_CHECK(it != outputs_.end(), "no output for sample ", s.counts().sample, " of record ",
                s.counts().order);
  return it->second;
}

void ResultPublisher::apply(const std::vector<RowOutcome>& rows, StructuredOutputs* structured) {
  std::vector<Sequence*> advanced;  // grammars that took a token: their masks are made below
  for (const RowOutcome& o : rows) {
    Sequence& s = *o.sequence;
    if (o.forked_from != nullptr) {
      const std::span<const int32_t> prompt(s.tokens().data(),
                                            static_cast<size_t>(s.counts().prompt));
      outputs_.insert_or_assign(&s, output(*o.forked_from).fork(prompt));
      if (structured != nullptr) structured->fork(*o.forked_from, s);
    }
    OutputState& out = output(s);
    switch (o.kind) {
      case RowOutcome::Kind::kNonFinite:
        out.fail("the model's logits for this request are not finite (NaN or Inf) at position " +
                 std::to_string(o.position) +
                 ": its activations overflowed or its weights hold a NaN or Inf");
        break;
      case RowOutcome::Kind::kScored:
        out.score_token(*o.logprobs, o.target, o.token);
        break;
      case RowOutcome::Kind::kSampled: {
        if (o.logprobs != nullptr) out.record_logprobs(*o.logprobs, o.token);
        FinishReason end = out.take_token(s, rules_);
        if (end == FinishReason::kNone && structured != nullptr && structured->constrained(s)) {
          const GrammarEnd g = structured->advance(s);
          end = g.reason;
          if (end == FinishReason::kNone) advanced.push_back(&s);
          if (end == FinishReason::kStop) out.flush();  // its grammar is complete
          if (end == FinishReason::kError) out.fail(g.error);
        }
        if (end != FinishReason::kNone) s.finish(end);
        break;
      }
    }
  }
  if (advanced.empty()) return;
  const std::vector<GrammarEnd> ends = structured->make_masks({advanced.begin(), advanced.end()});
  for (size_t i = 0; i < advanced.size(); ++i) {
    Sequence& s = *advanced[i];
    if (ends[i].reason == FinishReason::kStop) output(s).flush();  // only a stop may follow
    if (ends[i].reason == FinishReason::kError) output(s).fail(ends[i].error);
    if (ends[i].reason != FinishReason::kNone) s.finish(ends[i].reason);
  }
}

void ResultPublisher::publish(uint64_t order, Result result) {
  ++published_;
  result.order = order;
  if (ordered_)
    ordered_->submit(order, std::move(result));
  else
    sink_.write(result);
}

void ResultPublisher::retire(Sequence& s) {
  const auto now = Clock::now();
  const auto it = outputs_.find(&s);
  TPLLAMA_CHECK(it != outputs_.end(), "retiring a sequence without an output");
  OutputState out = std::move(it->second);
  outputs_.erase(it);
  const SequenceCounts& c = s.counts();
  const int generated = c.generated;
  summary_.generated_tokens += generated;
  RequestLatencies& l = summary_.latency;
  const bool first_sample = c.sample == 0;  // a request's time to first token, once
  if (generated > 0 && first_sample) l.ttft.add(seconds_between(out.admitted(), out.first_token()));
  if (generated > 1) l.tpot.add(seconds_between(out.first_token(), now) / (generated - 1));
  if (generated > 0 && first_sample)
    l.ttft_from_start.add(seconds_between(start_, out.first_token()));
  // A first sample that failed before its last prompt position's step came back forked none: it
  // is the whole record.
  const int n = c.forks_left > 0 ? 1 : s.request().n;
  if (s.request().n == 1) {
    l.latency_from_start.add(seconds_between(start_, now));
    publish(c.order, out.take_result(s));
    return;
  }
  // A request of n samples: one record, once the last of them finishes.
  Samples& samples = samples_[c.order];
  samples.results.resize(static_cast<size_t>(n));
  samples.results[static_cast<size_t>(c.sample)] = out.take_result(s);
  if (++samples.finished < n) return;
  l.latency_from_start.add(seconds_between(start_, now));
  Result joined = join_samples(std::move(samples.results));
  samples_.erase(c.order);
  publish(c.order, std::move(joined));
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
