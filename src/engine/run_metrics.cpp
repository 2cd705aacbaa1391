// LatencyHistogram and the run summary's line.
#include "engine/run_metrics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tpllama {

void LatencyHistogram::add(double seconds) {
  const double v = std::max(seconds, 0.0);
  const size_t bucket =
      v <= kMin ? 0 : static_cast<size_t>(std::log(v / kMin) / std::log(kGrowth)) + 1;
  if (bucket >= buckets_.size()) buckets_.resize(bucket + 1, 0);
  ++buckets_[bucket];
  ++count_;
  sum_ += v;
  max_ = std::max(max_, v);
}

double LatencyHistogram::percentile(double p) const {
  if (count_ == 0) return 0;
  const long long rank = std::max<long long>(
      1, static_cast<long long>(std::ceil(p / 100.0 * static_cast<double>(count_))));
  long long seen = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    seen += buckets_[b];
    if (seen >= rank) {
      if (b == 0) return kMin;
      return std::min(max_,
                      kMin * std::pow(kGrowth, static_cast<double>(b) - 0.5));  // bucket middle
    }
  }
  return max_;
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  if (other.buckets_.size() > buckets_.size()) buckets_.resize(other.buckets_.size(), 0);
  for (size_t b = 0; b < other.buckets_.size(); ++b) buckets_[b] += other.buckets_[b];
  count_ += other.count_;
  sum_ += other.sum_;
  max_ = std::max(max_, other.max_);
}

void LatencyHistogram::encode(ByteWriter& w) const {
  w.put_vector(buckets_);
  w.put(count_);
  w.put(sum_);
  w.put(max_);
}

LatencyHistogram LatencyHistogram::decode(ByteReader& r) {
  LatencyHistogram h;
  h.buckets_ = r.get_vector<long long>();
  h.count_ = r.get<long long>();
  h.sum_ = r.get<double>();
  h.max_ = r.get<double>();
  return h;
}

std::vector<uint8_t> encode_summary(const RunSummary& s) {
  ByteWriter w;
  w.put(s.records);
  for (long long v : {s.prompt_tokens, s.generated_tokens, s.steps, s.preemptions, s.skipped,
                      s.unmatched_records, s.abandoned, s.unwritten})
    w.put(v);
  w.put<uint8_t>(s.prefix_caching ? 1 : 0);
  w.put(s.prefix);
  w.put(s.stopped_by);
  w.put(s.seconds);
  w.put(s.phases);
  for (const LatencyHistogram* h : {&s.latency.ttft, &s.latency.tpot, &s.latency.ttft_from_start,
                                    &s.latency.latency_from_start, &s.structured.masks})
    h->encode(w);
  w.put(s.structured.requests);
  w.put(s.structured.grammars_compiled);
  w.put(s.structured.compile_seconds);
  w.put(s.structured.masks_walked);
  w.put_vector(s.replicas);
  return std::move(w.bytes);
}

RunSummary decode_summary(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "run summary message");
  RunSummary s;
  s.records = r.get<RecordCounts>();
  for (long long* v : {&s.prompt_tokens, &s.generated_tokens, &s.steps, &s.preemptions, &s.skipped,
                       &s.unmatched_records, &s.abandoned, &s.unwritten})
    *v = r.get<long long>();
  s.prefix_caching = r.get<uint8_t>() != 0;
  s.prefix = r.get<PrefixCacheStats>();
  s.stopped_by = r.get<int>();
  s.seconds = r.get<double>();
  s.phases = r.get<StepPhases>();
  for (LatencyHistogram* h : {&s.latency.ttft, &s.latency.tpot, &s.latency.ttft_from_start,
                              &s.latency.latency_from_start, &s.structured.masks})
    *h = LatencyHistogram::decode(r);
  s.structured.requests = r.get<long long>();
  s.structured.grammars_compiled = r.get<long long>();
  s.structured.compile_seconds = r.get<double>();
  s.structured.masks_walked = r.get<long long>();
  s.replicas = r.get_vector<ReplicaFigures>();
  TPLLAMA_CHECK(r.at_end(), "run summary message of ", bytes.size(), " bytes has ",
                bytes.size() - r.position(), " bytes past its end");
  return s;
}

void add_replica_summary(RunSummary& total, const RunSummary& part) {
  RecordCounts& r = total.records;
  r.requests += part.records.requests;
  r.finished_stop += part.records.finished_stop;
  r.finished_length += part.records.finished_length;
  r.scored += part.records.scored;
  r.errors += part.records.errors;
  total.prompt_tokens += part.prompt_tokens;
  total.generated_tokens += part.generated_tokens;
  total.steps += part.steps;
  total.preemptions += part.preemptions;
  total.prefix_caching = total.prefix_caching || part.prefix_caching;
  total.prefix.prompt_tokens += part.prefix.prompt_tokens;
  total.prefix.hit_tokens += part.prefix.hit_tokens;
  total.prefix.recompute_hits += part.prefix.recompute_hits;
  total.prefix.evicted_blocks += part.prefix.evicted_blocks;
  total.abandoned += part.abandoned;
  if (total.stopped_by == 0) total.stopped_by = part.stopped_by;
  total.seconds = std::max(total.seconds, part.seconds);
  StepPhases& p = total.phases;
  p.prefill_seconds += part.phases.prefill_seconds;
  p.decode_seconds += part.phases.decode_seconds;
  p.prefill_step_tokens += part.phases.prefill_step_tokens;
  p.decode_step_tokens += part.phases.decode_step_tokens;
  p.decode_steps += part.phases.decode_steps;
  p.decode_context_tokens += part.phases.decode_context_tokens;
  total.latency.ttft.merge(part.latency.ttft);
  total.latency.tpot.merge(part.latency.tpot);
  total.latency.ttft_from_start.merge(part.latency.ttft_from_start);
  total.latency.latency_from_start.merge(part.latency.latency_from_start);
  StructuredOutputStats& st = total.structured;
  st.requests += part.structured.requests;
  st.grammars_compiled += part.structured.grammars_compiled;
  st.compile_seconds += part.structured.compile_seconds;
  st.masks.merge(part.structured.masks);
  st.masks_walked += part.structured.masks_walked;
  total.replicas.insert(total.replicas.end(), part.replicas.begin(), part.replicas.end());
}

std::string RunSummary::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  const RecordCounts& r = records;
  os << r.requests << " requests (" << r.finished_stop << " stop, " << r.finished_length
     << " length, ";
  if (r.scored > 0) os << r.scored << " scored, ";
  os << r.errors << " errors) in " << seconds << " s; prompt tokens " << prompt_tokens
     << ", generated tokens " << generated_tokens << " ("
     << (seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0.0) << " tok/s), "
     << steps << " steps, " << preemptions << " preemptions";
  if (prefix_caching) os << "; " << describe_prefix_cache();
  if (structured.requests > 0) {
    os.precision(3);
    os << "; structured outputs: " << structured.requests << " requests, "
       << structured.grammars_compiled << " grammars compiled in "
       << 1e3 * structured.compile_seconds << " ms, token masks " << 1e3 * structured.masks.mean()
       << " ms mean, " << 1e3 * structured.masks.percentile(99) << " ms p99 ("
       << structured.masks_walked << " of " << structured.masks.count()
       << " walked, the rest memoized)";
    os.precision(1);
  }
  if (skipped > 0) os << "; " << skipped << " already in the output, skipped";
  if (stopped_by != 0)
    os << "; stopped early by signal " << stopped_by << " (" << abandoned
       << " unfinished requests abandoned)";
  if (unwritten > 0)
    os << "; " << unwritten
       << " finished results, held back for --ordered behind those, not written (--resume "
       << "recomputes them, keeping the output in input order)";
  return os.str();
}

std::string RunSummary::describe_prefix_cache() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  const PrefixCacheStats& p = prefix;
  const double rate = p.prompt_tokens > 0 ? 100.0 * static_cast<double>(p.hit_tokens) /
                                                static_cast<double>(p.prompt_tokens)
                                          : 0.0;
  os << "prefix cache: " << rate << "% of prompt tokens (" << p.hit_tokens << " of "
     << p.prompt_tokens << "), " << p.evicted_blocks << " blocks evicted";
  if (p.recompute_hits > 0) os << ", " << p.recompute_hits << " positions served to recomputes";
  return os.str();
}

}  // namespace tpllama
