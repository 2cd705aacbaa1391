// JSON Schema's string constraints as regexes (regex.h's syntax): a pattern searched in a string,
// the formats' texts, and the lengths a regex's texts can have.
#include "grammar/schema_regex.h"

#include <algorithm>

#include "core/error.h"

namespace tpllama::grammar {
namespace {

// Where a pattern's '|' at its top level would bind an anchor to one side only.
bool top_level_alternation(const std::string& p) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == ']') ++i;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return true;
    }
  }
  return false;
}

// Whether the last character of p is an unescaped '$'.
bool ends_anchored(const std::string& p) {
  if (p.empty() || p.back() != '$') return false;
  size_t backslashes = 0;
  for (size_t i = p.size() - 1; i-- > 0 && p[i] == '\\';) ++backslashes;
  return backslashes % 2 == 0;
}

}  // namespace

std::string searched(const std::string& pattern, const std::string& any, bool python_dollar) {
  std::string body = pattern;
  const bool start = !body.empty() && body.front() == '^';
  if (start) body.erase(0, 1);
  const bool end = ends_anchored(body);
  if (end) body.pop_back();
  if ((start || end) && top_level_alternation(body))
    fail("an anchor beside a '|' at the pattern's top level (group the alternatives)");
  // Python's $ (python3-jsonschema's re.search) also matches before a last newline.
  return (start ? "" : any) + "(?:" + body + ")" + (end ? (python_dollar ? "\\n?" : "") : any);
}

// Regexes of the string formats, over the decoded string: texts every validator takes (RFC 3339's
// and RFC 4122's forms, dates that exist).
const std::vector<std::pair<std::string, std::string>>& schema_formats() {
  // A year from 1 (Python's dates have no year 0), each month's days, February 29th in leap years.
  static const std::string year = R"((000[1-9]|00[1-9]\d|0[1-9]\d{2}|[1-9]\d{3}))";
  static const std::string month_day =
      R"(((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
  static const std::string leap_year =
      R"((\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
  static const std::string date = "(" + year + "-" + month_day + "|" + leap_year + "-02-29)";
  // Seconds to 59 (a leap second is not every validator's), at most 6 fraction digits (Python's).
  static const std::string time =
      R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"date", date},
      {"time", time},
      {"date-time", date + "T" + time},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"email", R"([a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,})"},
  };
  return table;
}

// The fewest and the most characters of the texts a grammar matches (a byte set of UTF-8 lead
// bytes is one, of continuation bytes none); most -1: no bound. nullopt where a byte set mixes
// them.
std::optional<std::pair<int, int>> char_range(const Grammar& g) {
  std::vector<int> weight(g.sets.size());
  for (size_t i = 0; i < g.sets.size(); ++i) {
    bool lead = false, continuation = false;
    for (int b = 0; b < 256; ++b)
      if (g.sets[i].has(static_cast<uint8_t>(b))) ((b & 0xC0) == 0x80 ? continuation : lead) = true;
    if (lead && continuation) return std::nullopt;
    weight[i] = lead ? 1 : 0;
  }
  constexpr long kInfinite = 1L << 40;
  const size_t rules = g.alternatives.size();
  // The fewest: relaxed until nothing changes.
  std::vector<long> fewest(rules, kInfinite);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules; ++r)
      for (const uint32_t start : g.alternatives[r]) {
        long sum = 0;
        for (uint32_t p = start; g.elements[p] != Grammar::kEnd && sum < kInfinite; ++p) {
          const uint32_t e = g.elements[p];
          sum += (e & Grammar::kRuleFlag) ? fewest[e & ~Grammar::kRuleFlag] : weight[e];
        }
        if (sum < fewest[r]) {
          fewest[r] = sum;
          changed = true;
        }
      }
  }
  // The most: a rule that reaches itself repeats without bound.
  std::vector<long> most(rules, -2);  // -2 unknown, -3 being walked, -1 unbounded
  const auto walk = [&](auto&& self, size_t r) -> long {
    if (most[r] == -3) return -1;
    if (most[r] != -2) return most[r];
    most[r] = -3;
    long best = 0;
    for (const uint32_t start : g.alternatives[r]) {
      long sum = 0;
      for (uint32_t p = start; g.elements[p] != Grammar::kEnd; ++p) {
        const uint32_t e = g.elements[p];
        const long w = (e & Grammar::kRuleFlag) ? self(self, e & ~Grammar::kRuleFlag) : weight[e];
        if (w < 0 || sum < 0) {
          sum = -1;
        } else {
          sum += w;
        }
      }
      if (sum < 0 || best < 0)
        best = -1;
      else
        best = std::max(best, sum);
    }
    most[r] = best;
    return best;
  };
  const long lo = fewest[g.root], hi = walk(walk, g.root);
  if (lo >= kInfinite) return std::nullopt;
  return std::pair<int, int>{static_cast<int>(std::min(lo, 1L << 30)),
                             hi < 0 ? -1 : static_cast<int>(std::min(hi, 1L << 30))};
}

}  // namespace tpllama::grammar
