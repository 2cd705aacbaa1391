// LatencyHistogram, IdIndex and the run summary's line.
#include "runtime/run_metrics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/hash.h"

namespace tpllama {

void LatencyHistogram::add(double seconds) {
  const double v = std::max(seconds, 0.0);
  const size_t bucket = v <= kMin ? 0 : static_cast<size_t>(std::log(v / kMin) / std::log(kGrowth)) + 1;
  if (bucket >= buckets_.size()) buckets_.resize(bucket + 1, 0);
  ++buckets_[bucket];
  ++count_;
  sum_ += v;
  max_ = std::max(max_, v);
}

double LatencyHistogram::percentile(double p) const {
  if (count_ == 0) return 0;
  const long long rank = std::max<long long>(1, static_cast<long long>(std::ceil(p / 100.0 * static_cast<double>(count_))));
  long long seen = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    seen += buckets_[b];
    if (seen >= rank) {
      if (b == 0) return kMin;
      return std::min(max_, kMin * std::pow(kGrowth, static_cast<double>(b) - 0.5));  // bucket middle
    }
  }
  return max_;
}

namespace {

uint64_t fnv1a64(const std::string& s) {
  Fnv1a fnv;
  fnv.add(s);
  uint64_t h = fnv.value();
  h ^= h >> 33;  // finalizer: spreads FNV's low bits over the table index
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

}  // namespace

uint32_t IdIndex::insert(const std::string& key, uint32_t line) {
  if (2 * (size_ + 1) > hashes_.size()) grow();
  const uint64_t h = fnv1a64(key);
  const size_t mask = hashes_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    if (hashes_[i] == 0) {
      hashes_[i] = h;
      lines_[i] = line;
      ++size_;
      return 0;
    }
    if (hashes_[i] == h) return lines_[i];
  }
}

void IdIndex::grow() {
  std::vector<uint64_t> old_hashes = std::move(hashes_);
  std::vector<uint32_t> old_lines = std::move(lines_);
  const size_t capacity = std::max<size_t>(1024, old_hashes.size() * 2);
  hashes_.assign(capacity, 0);
  lines_.assign(capacity, 0);
  const size_t mask = capacity - 1;
  for (size_t j = 0; j < old_hashes.size(); ++j) {
    if (old_hashes[j] == 0) continue;
    size_t i = old_hashes[j] & mask;
    while (hashes_[i] != 0) i = (i + 1) & mask;
    hashes_[i] = old_hashes[j];
    lines_[i] = old_lines[j];
  }
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
  if (skipped > 0) os << "; " << skipped << " already in the output, skipped";
  if (stopped_by != 0)
    os << "; stopped early by signal " << stopped_by << " (" << abandoned << " unfinished requests abandoned)";
  if (unwritten > 0)
    os << "; " << unwritten << " finished results, held back for --ordered behind those, not written (--resume "
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
