// The monotonic clock every timing of a run uses, and seconds between its points.
#pragma once

#include <chrono>

namespace tpllama {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline double seconds_since(Clock::time_point t) {
  return seconds_between(t, Clock::now());
}

}  // namespace tpllama
