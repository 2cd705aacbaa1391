// Byte sizes in and out.
#include "core/byte_size.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace tpllama {

uint64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("cannot read '", text, "' as a size (examples: 8GiB, 512MiB, 2GB, 1000000)");
  }
  std::string unit = text.substr(used);
  const std::pair<const char*, double> units[] = {{"", 1},
                                                  {"B", 1},
                                                  {"KB", 1e3},
                                                  {"MB", 1e6},
                                                  {"GB", 1e9},
                                                  {"TB", 1e12},
                                                  {"KiB", 1024.0},
                                                  {"MiB", 1048576.0},
                                                  {"GiB", 1073741824.0},
                                                  {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      if (!(value > 0) || !std::isfinite(value * scale)) fail("size '", text, "' must be positive");
      if (value * scale >= 0x1p63)
        fail("size '", text, "' is beyond any machine's memory (at most 8 EiB)");
      return static_cast<uint64_t>(value * scale);
    }
  fail("unknown size unit in '", text, "' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
}

std::string mib(double bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << bytes / (1 << 20) << " MiB";
  return os.str();
}

std::string byte_limit_text(uint64_t bytes) {
  constexpr std::pair<const char*, int> kUnits[] = {{"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  for (const auto& [unit, shift] : kUnits)
    if (bytes >= (uint64_t{1} << shift) && bytes % (uint64_t{1} << shift) == 0)
      return std::to_string(bytes >> shift) + " " + unit;
  return std::to_string(bytes) + " bytes";
}

}  // namespace tpllama
