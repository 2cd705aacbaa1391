#include "app/cli_checks.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace tpllama {
namespace {

// "1", "0.5", "1e+06": the shortest text that reads back as the bound.
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& s) -> std::string {
        const bool negative = !s.empty() && s[0] == '-';
        const std::string digits = s.substr(negative ? 1 : 0);
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
          return "expected an integer, got '" + s + "'";
        if (digits.size() > 1 && digits[0] == '0')  // CLI11 would read it as octal
          return "write " + s + " without leading zeros";
        // More digits than any bound here has: past it on the positive side, below it on the other.
        const bool huge = digits.size() > 18;
        const bool below =
            negative ? (huge || -std::stoll(digits) < min) : (!huge && std::stoll(digits) < min);
        if (below) return "must be at least " + std::to_string(min) + ", got " + s;
        return "";
      },
      min == 1   ? "POSITIVE"
      : min == 0 ? "NONNEGATIVE"
                 : ">=" + std::to_string(min));
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::string max = "18446744073709551615";
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "expected an integer from 0 to " + max + ", got '" + s + "'";
        if (s.size() > 1 && s[0] == '0') return "write " + s + " without leading zeros";
        if (s.size() > max.size() || (s.size() == max.size() && s > max))
          return "must be at most " + max + " (2^64 - 1), got " + s;
        return "";
      },
      "0 to 2^64-1");
}

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != s.size()) return "expected a number, got '" + s + "'";
        if (!std::isfinite(v) || v < lo || v > hi)
          return "must be in [" + number(lo) + ", " + number(hi) + "], got " + s;
        return "";
      },
      "[" + number(lo) + ", " + number(hi) + "]");
}

CLI::Validator not_empty(const std::string& instead) {
  return CLI::Validator(
      [instead](std::string& s) -> std::string {
        return s.empty() ? "is empty: give a value, or leave the flag out for " + instead : "";
      },
      "");
}

}  // namespace tpllama
