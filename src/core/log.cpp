// Rank-prefixed stderr logging; one line per call, written with a single fwrite so lines from
// different ranks do not interleave mid-line.
#include "core/log.h"

#include <cstdio>

namespace tpllama::log {
namespace {
int g_rank = 0;
int g_world = 1;

const char* level_name(Level level) {
  switch (level) {
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warning";
    case Level::kError:
      return "error";
  }
  return "?";
}
}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}

void write(Level level, const std::string& message) {
  std::string line = "[tpllama";
  if (g_world > 1) line += " r" + std::to_string(g_rank);
  line += "] ";
  if (level != Level::kInfo) line += std::string(level_name(level)) + ": ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace tpllama::log
