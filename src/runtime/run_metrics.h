// Constant-memory bookkeeping for runs of millions of requests: a log-bucketed latency histogram
// (percentiles within 1%) and a compact hash index of the request ids seen (duplicate detection).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpllama {

class LatencyHistogram {
 public:
  void add(double seconds);
  long long count() const { return count_; }
  double mean() const { return count_ > 0 ? sum_ / static_cast<double>(count_) : 0.0; }
  // Nearest-rank percentile (p in [0, 100]), accurate to the 1% bucket width.
  double percentile(double p) const;

 private:
  static constexpr double kMin = 1e-7;     // seconds; smaller values land in bucket 0
  static constexpr double kGrowth = 1.01;  // bucket width ratio
  std::vector<long long> buckets_;
  long long count_ = 0;
  double sum_ = 0;
  double max_ = 0;
};

// Open-addressing set of 64-bit id hashes with the line each id first appeared on: 12 bytes a
// slot at most half full, so a 10-million-line input costs about 240 MB rather than gigabytes of
// strings. Two distinct ids collide with probability about n²/2^65.
class IdIndex {
 public:
  // Records key at line; returns 0 when new, else the line it was first recorded at.
  uint32_t insert(const std::string& key, uint32_t line);

 private:
  void grow();
  std::vector<uint64_t> hashes_;  // 0 = empty
  std::vector<uint32_t> lines_;
  size_t size_ = 0;
};

}  // namespace tpllama
