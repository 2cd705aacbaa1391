// Progress lines: done/total, errors, running, generated (and scored) tok/s and an ETA from the
// request rate.
#include "engine/progress.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>

#include "core/log.h"

namespace tpllama {
namespace {

std::string duration_text(double seconds) {
  const long long s = static_cast<long long>(seconds + 0.5);
  std::ostringstream os;
  if (s >= 3600)
    os << s / 3600 << "h" << (s % 3600) / 60 << "m";
  else if (s >= 60)
    os << s / 60 << "m" << s % 60 << "s";
  else
    os << s << "s";
  return os.str();
}

}  // namespace

Progress::Progress(long long total, bool terminal, double interval_seconds,
                   double first_line_seconds, std::string unit)
    : total_(total),
      terminal_(terminal),
      interval_(terminal ? 0.5 : interval_seconds),
      first_line_(std::min(interval_, first_line_seconds)),
      unit_(std::move(unit)) {}

void Progress::update(const ProgressCounts& c) {
  const double wait = printed_ ? interval_ : first_line_;
  if (std::chrono::duration<double>(Clock::now() - last_).count() < wait) return;
  print(c, false);
}

void Progress::finish(const ProgressCounts& c) {
  if (terminal_ && printed_) print(c, true);
}

void Progress::print(const ProgressCounts& c, bool final) {
  last_ = Clock::now();
  const double elapsed = std::chrono::duration<double>(last_ - start_).count();
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "progress: " << c.done;
  if (total_ > 0)
    os << "/" << total_ << " (" << 100.0 * static_cast<double>(c.done) / static_cast<double>(total_)
       << "%)";
  os << " " << unit_ << ", " << c.errors << " errors, " << c.running << " running, ";
  const auto rate = [&](long long tokens) {
    return elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0;
  };
  // Scoring generates nothing: its rate is of the tokens it scores, said apart from generation's.
  if (c.generated_tokens > 0 || c.scored_tokens == 0) os << rate(c.generated_tokens) << " tok/s, ";
  if (c.scored_tokens > 0) os << rate(c.scored_tokens) << " scored tok/s, ";
  os << duration_text(elapsed);
  if (total_ > 0 && c.done > 0 && c.done < total_)
    os << ", ETA "
       << duration_text(elapsed / static_cast<double>(c.done) *
                        static_cast<double>(total_ - c.done));
  if (c.prefix_caching && c.prefix_prompt_tokens > 0)
    os << ", prefix cache "
       << 100.0 * static_cast<double>(c.prefix_hit_tokens) /
              static_cast<double>(c.prefix_prompt_tokens)
       << "% (" << c.prefix_evicted_blocks << " evicted)";
  if (!terminal_) {
    log::info(os.str());
    printed_ = true;
    return;
  }
  const std::string line = "\r\033[K[tpllama] " + os.str() + (final ? "\n" : "");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  printed_ = true;
}

}  // namespace tpllama
