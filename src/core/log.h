// Rank-prefixed logging to stderr. The rank is set once by main; info() is shown by every rank
// that calls it, so callers decide who speaks (usually rank 0).
#pragma once

#include <string>

namespace tpllama::log {

enum class Level { kInfo, kWarn, kError };

void set_rank(int rank, int world_size);
void write(Level level, const std::string& message);

inline void info(const std::string& m) {
  write(Level::kInfo, m);
}
inline void warn(const std::string& m) {
  write(Level::kWarn, m);
}
inline void error(const std::string& m) {
  write(Level::kError, m);
}

}  // namespace tpllama::log
