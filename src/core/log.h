// Rank-prefixed logging to stderr. The rank is set once by main; info() is shown by every rank
// that calls it, so callers decide who speaks (usually rank 0).
#pragma once

#include <string>

namespace tpllama::log {

enum class Level { kDebug, kInfo, kWarn, kError };

void set_rank(int rank, int world_size);
void set_level(Level level);
void write(Level level, const std::string& message);

inline void debug(const std::string& m) { write(Level::kDebug, m); }
inline void info(const std::string& m) { write(Level::kInfo, m); }
inline void warn(const std::string& m) { write(Level::kWarn, m); }
inline void error(const std::string& m) { write(Level::kError, m); }

}  // namespace tpllama::log
