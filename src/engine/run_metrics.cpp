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
