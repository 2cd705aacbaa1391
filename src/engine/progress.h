// Progress of a run on stderr: on a terminal one line rewritten in place a few times a second;
// otherwise (Slurm logs) one plain line every `interval` seconds. Never a line per request.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tpllama {

struct ProgressCounts {
  long long done = 0;  // requests finished (or skipped as already in the output)
  long long errors = 0;
  long long running = 0;
  long long generated_tokens = 0;  // so far, running requests' tokens included
  long long scored_tokens = 0;     // scoring requests' continuation tokens scored so far
  bool prefix_caching = false;
  long long prefix_prompt_tokens = 0;  // prompt tokens that asked the prefix cache, and its hits
  long long prefix_hit_tokens = 0;
  long long prefix_evicted_blocks = 0;
};

class Progress {
 public:
  // total: requests expected (0 when unknown, e.g. reading a pipe). Off a terminal the first line
  // comes after first_line_seconds (or the interval, when shorter), then one every interval: under
  // mpirun stderr is a pipe even when a user watches it, and should not wait 30 s for a first sign.
  // unit: what the requests are to the user ("windows" for perplexity).
  Progress(long long total, bool terminal, double interval_seconds,
           double first_line_seconds = kFirstLineSeconds, std::string unit = "requests");

  static constexpr double kFirstLineSeconds = 3.0;
  void update(const ProgressCounts& counts);
  // Ends the in-place line on a terminal.
  void finish(const ProgressCounts& counts);

 private:
  void print(const ProgressCounts& counts, bool final);

  using Clock = std::chrono::steady_clock;
  long long total_;
  bool terminal_;
  double interval_;
  double first_line_;
  std::string unit_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = Clock::now();
  bool printed_ = false;
};

}  // namespace tpllama
