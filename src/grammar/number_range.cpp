// Ranges of JSON numbers as regex text: naturals split by digit count and first differing digit,
// fractions walked digit by digit against their bounds.
#include "grammar/number_range.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace tpllama::grammar {
namespace {

// Natural numbers as digit strings without leading zeros ("0" for zero).
int compare_natural(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : (a > b ? 1 : 0);
}

std::string trim_leading_zeros(std::string s) {
  const size_t nonzero = s.find_first_not_of('0');
  if (nonzero == std::string::npos) return "0";
  return s.substr(nonzero);
}

std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

std::string decrement(std::string s) {  // s > 0
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  return trim_leading_zeros(s);
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string(1, lo);
  if (lo == '0' && hi == '9') return "\\d";
  return std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "\\d" : "\\d{" + std::to_string(n) + "}";
}

std::string group(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives.front();
  std::string out = "(?:";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? "|" : "") + alternatives[i];
  return out + ")";
}

// Digit strings of r's length that are at least r / at most r.
std::string at_least(const std::string& r) {
  if (r.empty()) return "";
  if (r.find_first_not_of('0') == std::string::npos) return any_digits(r.size());
  std::vector<std::string> alts = {std::string(1, r[0]) + at_least(r.substr(1))};
  if (r[0] < '9')
    alts.push_back(digit_class(static_cast<char>(r[0] + 1), '9') + any_digits(r.size() - 1));
  return group(alts);
}

std::string at_most(const std::string& r) {
  if (r.empty()) return "";
  if (r.find_first_not_of('9') == std::string::npos) return any_digits(r.size());
  std::vector<std::string> alts = {std::string(1, r[0]) + at_most(r.substr(1))};
  if (r[0] > '0')
    alts.push_back(digit_class('0', static_cast<char>(r[0] - 1)) + any_digits(r.size() - 1));
  return group(alts);
}

// The naturals in [x, y], both of one length.
std::string same_length(const std::string& x, const std::string& y) {
  if (x == y) return x;
  size_t i = 0;
  while (x[i] == y[i]) ++i;
  const std::string prefix = x.substr(0, i), xr = x.substr(i + 1), yr = y.substr(i + 1);
  if (xr.find_first_not_of('0') == std::string::npos &&
      yr.find_first_not_of('9') == std::string::npos)
    return prefix + digit_class(x[i], y[i]) + any_digits(xr.size());
  std::vector<std::string> alts = {std::string(1, x[i]) + at_least(xr)};
  if (y[i] - x[i] >= 2)
    alts.push_back(digit_class(static_cast<char>(x[i] + 1), static_cast<char>(y[i] - 1)) +
                   any_digits(xr.size()));
  alts.push_back(std::string(1, y[i]) + at_most(yr));
  return prefix + group(alts);
}

// The smallest natural of len digits (len >= 1).
std::string smallest_of_length(size_t len) {
  std::string s(len, '0');
  s[0] = '1';
  return s;
}

// The naturals in [a, b] (a <= b), without leading zeros. The lengths a range holds whole are
// one piece, [1-9]\d{m,n}: a matcher then follows one path, not one per length.
std::string natural_range(const std::string& a, const std::string& b) {
  std::vector<std::string> alts;
  size_t whole_from = 0, whole_to = 0;  // a run of whole lengths, [from, to]
  const auto flush = [&] {
    if (whole_from == 0) return;
    std::string piece = "[1-9]";
    if (whole_to > 1) {
      piece += "\\d{";
      if (whole_from != whole_to) piece += std::to_string(whole_from - 1) + ",";
      piece += std::to_string(whole_to - 1);
      piece += "}";
    }
    alts.push_back(std::move(piece));
    whole_from = 0;
  };
  for (size_t len = a.size(); len <= b.size(); ++len) {
    const std::string lo = len == a.size() ? a : smallest_of_length(len);
    const std::string hi = len == b.size() ? b : std::string(len, '9');
    const bool whole = lo[0] == '1' && lo.find_first_not_of('0', 1) == std::string::npos &&
                       hi.find_first_not_of('9') == std::string::npos;
    if (whole) {
      if (whole_from == 0) whole_from = len;
      whole_to = len;
      continue;
    }
    flush();
    alts.push_back(same_length(lo, hi));
  }
  flush();
  return group(alts);
}

std::string largest(int digits) {
  return std::string(static_cast<size_t>(std::max(digits, 1)), '9');
}

// A signed whole number: its sign and its magnitude's digits.
struct Whole {
  bool negative = false;
  std::string magnitude = "0";
};

int compare(const Whole& a, const Whole& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = compare_natural(a.magnitude, b.magnitude);
  return a.negative ? -c : c;
}

// The smallest integer in the range above the bound (ceiling, or one more where exclusive), and
// the largest below it.
Whole lowest_integer(const Decimal& d, bool exclusive) {
  const bool step = !d.whole() || exclusive;  // the integer part is not in the range
  if (!d.negative) return {false, step ? increment(d.integer) : d.integer};
  // -I.F: its ceiling is -I; exclusive of a whole -I: -(I - 1).
  if (!d.whole()) return {d.integer != "0", d.integer};
  if (!exclusive) return {true, d.integer};
  const std::string m = decrement(d.integer);
  return {m != "0", m};
}

Whole highest_integer(const Decimal& d, bool exclusive) {
  Decimal mirrored = d;
  mirrored.negative = !d.negative && !(d.integer == "0" && d.whole());
  Whole w = lowest_integer(mirrored, exclusive);
  w.negative = !w.negative && w.magnitude != "0";
  return w;
}

// Where a fraction's digits stand against one bound: already clear of it, or level with it and
// `rest` of its digits still to come.
struct Side {
  bool clear = false;
  std::string rest;
  bool operator<(const Side& o) const { return std::tie(clear, rest) < std::tie(o.clear, o.rest); }
};

// Fraction digits (after the point) between 0.lo and 0.hi, walked digit by digit.
class FractionRange {
 public:
  FractionRange(bool lo_exclusive, bool hi_exclusive, bool need_nonzero)
      : lo_exclusive_(lo_exclusive), hi_exclusive_(hi_exclusive), need_nonzero_(need_nonzero) {}

  // The fraction part as regex: "" (no fraction), or \.D+ for each digit string D of at most
  // `max_digits` digits whose value lies in range, the string ending where the value allows.
  std::optional<std::string> regex(const Side& lo, const Side& hi, int max_digits) {
    std::vector<std::string> alts;
    if (may_end(lo, hi, false)) alts.push_back("");
    if (std::optional<std::string> d = digits(lo, hi, false, max_digits))
      alts.push_back("\\." + *d);
    if (alts.empty()) return std::nullopt;
    if (alts.size() == 2 && alts[0].empty()) return "(?:" + alts[1] + ")?";
    return group(alts);
  }

 private:
  // Whether the digits may stop here (the rest are zeros).
  bool may_end(const Side& lo, const Side& hi, bool nonzero) const {
    if (need_nonzero_ && !nonzero) return false;
    if (!lo.clear && !(lo.rest.empty() && !lo_exclusive_)) return false;  // below, or equal
    if (!hi.clear && hi.rest.empty() && hi_exclusive_) return false;      // equal
    return true;
  }
  // Where a side stands after one more digit c; nullopt: past the bound.
  static std::optional<Side> step_low(const Side& s, char c) {
    if (s.clear) return s;
    const char b = s.rest.empty() ? '0' : s.rest[0];
    if (c < b) return std::nullopt;
    if (c > b) return Side{true, ""};
    return Side{false, s.rest.empty() ? "" : s.rest.substr(1)};
  }
  static std::optional<Side> step_high(const Side& s, char c) {
    if (s.clear) return s;
    const char b = s.rest.empty() ? '0' : s.rest[0];
    if (c > b) return std::nullopt;
    if (c < b) return Side{true, ""};
    return Side{false, s.rest.empty() ? "" : s.rest.substr(1)};
  }
  // At least one digit and at most `left`, from where lo and hi stand.
  std::optional<std::string> digits(const Side& lo, const Side& hi, bool nonzero, int left) {
    if (left <= 0) return std::nullopt;
    const auto key = std::make_tuple(lo, hi, nonzero, left);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::optional<std::string> result;
    if (lo.clear && hi.clear && (nonzero || !need_nonzero_)) {
      result = left == 1 ? "\\d" : "\\d{1," + std::to_string(left) + "}";
    } else {
      std::vector<std::string> alts;
      char first = 0;
      std::string pending_tail;
      bool open = false;
      const auto flush = [&](char last) {
        if (open) alts.push_back(digit_class(first, last) + pending_tail);
        open = false;
      };
      for (char c = '0'; c <= '9'; ++c) {
        const std::optional<Side> l = step_low(lo, c), h = step_high(hi, c);
        std::optional<std::string> tail;
        if (l && h) tail = this->tail(*l, *h, nonzero || c != '0', left - 1);
        if (!tail) {
          flush(static_cast<char>(c - 1));
          continue;
        }
        if (open && *tail == pending_tail) continue;  // the same tail: one class
        flush(static_cast<char>(c - 1));
        first = c;
        pending_tail = *tail;
        open = true;
      }
      flush('9');
      if (!alts.empty()) result = group(alts);
    }
    memo_.emplace(key, result);
    return result;
  }
  // What may follow a digit: nothing (where it may end), or more digits.
  std::optional<std::string> tail(const Side& lo, const Side& hi, bool nonzero, int left) {
    const bool end = may_end(lo, hi, nonzero);
    const std::optional<std::string> more = digits(lo, hi, nonzero, left);
    if (end && more) return "(?:" + *more + ")?";
    if (end) return std::string();
    return more;
  }

  bool lo_exclusive_, hi_exclusive_, need_nonzero_;
  std::map<std::tuple<Side, Side, bool, int>, std::optional<std::string>> memo_;
};

// How many fraction digits a number whose integer part is `integer` may have: within the
// fraction limit, and within the significant digits a double holds (so that jsonschema, which
// reads the number as a double, orders it as its decimal is ordered).
int fraction_digits(const std::string& integer, const DigitLimits& limits) {
  const int whole = integer == "0" ? 0 : static_cast<int>(integer.size());
  return std::max(0, std::min(limits.fraction, limits.significant - whole));
}

// The numbers of [lo, hi] that are not negative (lo >= 0), written INT(.FRAC)?; hi absent: open.
std::optional<std::string> positive_range(const Decimal& lo, bool lo_exclusive,
                                          const std::optional<Decimal>& hi, bool hi_exclusive,
                                          const DigitLimits& limits, bool not_integer) {
  std::vector<std::string> alts;
  const auto piece = [&](const std::string& integer_regex, int fraction, const Side& flo,
                         bool flo_ex, const Side& fhi, bool fhi_ex) {
    FractionRange f(flo_ex, fhi_ex, not_integer);
    if (std::optional<std::string> frac = f.regex(flo, fhi, fraction))
      alts.push_back(integer_regex + *frac);
  };
  const Side free{true, ""};
  if (hi && lo.integer == hi->integer) {
    piece(lo.integer, fraction_digits(lo.integer, limits), {false, lo.fraction}, lo_exclusive,
          {false, hi->fraction}, hi_exclusive);
  } else {
    piece(lo.integer, fraction_digits(lo.integer, limits), {false, lo.fraction}, lo_exclusive, free,
          false);
    const std::string from = increment(lo.integer);
    const std::string to =
        hi ? (hi->integer == "0" ? std::string() : decrement(hi->integer))
           : largest(std::max(limits.integer, static_cast<int>(lo.integer.size())));
    // The integer parts between, by the fraction digits their length leaves.
    if (!to.empty() && compare_natural(from, to) <= 0)
      for (size_t len = from.size(); len <= to.size();) {
        const std::string a = len == from.size() ? from : smallest_of_length(len);
        const int fraction = fraction_digits(a, limits);
        size_t last = len;
        while (last < to.size() && fraction_digits(std::string(last + 1, '1'), limits) == fraction)
          ++last;
        const std::string b = last == to.size() ? to : std::string(last, '9');
        piece(natural_range(a, b), fraction, free, false, free, false);
        len = last + 1;
      }
    if (hi)
      piece(hi->integer, fraction_digits(hi->integer, limits), free, false, {false, hi->fraction},
            hi_exclusive);
  }
  if (alts.empty()) return std::nullopt;
  return group(alts);
}

}  // namespace

std::optional<Decimal> Decimal::parse(const std::string& text, int max_digits) {
  size_t i = 0;
  Decimal d;
  if (i < text.size() && text[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string digits;
  size_t point = std::string::npos;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.');
       ++i) {
    if (text[i] == '.') {
      if (point != std::string::npos) return std::nullopt;
      point = digits.size();
    } else {
      digits += text[i];
    }
  }
  if (digits.empty()) return std::nullopt;
  if (point == std::string::npos) point = digits.size();
  long exponent = 0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool minus = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) minus = text[i++] == '-';
    if (i == text.size()) return std::nullopt;
    for (; i < text.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
      exponent = exponent * 10 + (text[i] - '0');
      if (exponent > max_digits) return std::nullopt;
    }
    if (minus) exponent = -exponent;
  }
  if (i != text.size()) return std::nullopt;
  const long shifted = static_cast<long>(point) + exponent;  // digits before the point
  if (shifted > max_digits || -shifted > max_digits) return std::nullopt;
  std::string integer, fraction;
  if (shifted <= 0) {
    integer = "0";
    fraction = std::string(static_cast<size_t>(-shifted), '0') + digits;
  } else if (static_cast<size_t>(shifted) >= digits.size()) {
    integer = digits + std::string(static_cast<size_t>(shifted) - digits.size(), '0');
  } else {
    integer = digits.substr(0, static_cast<size_t>(shifted));
    fraction = digits.substr(static_cast<size_t>(shifted));
  }
  d.integer = trim_leading_zeros(integer);
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  d.fraction = fraction;
  if (d.integer == "0" && d.fraction.empty()) d.negative = false;
  return d;
}

Decimal Decimal::exact(double v) {
  Decimal d;
  d.negative = std::signbit(v) && v != 0;
  int exponent = 0;
  const double fraction = std::frexp(std::fabs(v), &exponent);  // v = fraction * 2^exponent
  // The 53-bit integer m with v = m * 2^e.
  auto m = static_cast<uint64_t>(std::ldexp(fraction, 53));
  int e = exponent - 53;
  while (m != 0 && m % 2 == 0 && e < 0) {
    m /= 2;
    ++e;
  }
  // Digits, least significant first, times a small factor.
  std::string digits = std::to_string(m);
  std::reverse(digits.begin(), digits.end());
  const auto times = [&](int factor) {
    int carry = 0;
    for (char& c : digits) {
      const int x = (c - '0') * factor + carry;
      c = static_cast<char>('0' + x % 10);
      carry = x / 10;
    }
    for (; carry > 0; carry /= 10) digits += static_cast<char>('0' + carry % 10);
  };
  // m * 2^e: doubled e times, or (e < 0) m * 5^-e with the point -e digits from the right.
  for (int i = 0; i < std::abs(e); ++i) times(e > 0 ? 2 : 5);
  std::reverse(digits.begin(), digits.end());
  const size_t point = e >= 0 ? 0 : static_cast<size_t>(-e);
  if (digits.size() <= point) digits.insert(0, point - digits.size() + 1, '0');
  d.integer = trim_leading_zeros(digits.substr(0, digits.size() - point));
  d.fraction = digits.substr(digits.size() - point);
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  if (d.integer == "0" && d.fraction.empty()) d.negative = false;
  return d;
}

std::string Decimal::text() const {
  return (negative ? "-" : "") + integer + (fraction.empty() ? "" : "." + fraction);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = compare_natural(a.integer, b.integer);
  if (c == 0) {
    const size_t n = std::max(a.fraction.size(), b.fraction.size());
    const std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
    const std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
    c = fa < fb ? -1 : (fa > fb ? 1 : 0);
  }
  return a.negative ? -c : c;
}

std::optional<std::string> integer_range_regex(const RangeBound& lo, const RangeBound& hi,
                                               const DigitLimits& limits) {
  // An open side reaches as many digits as the limit, or one more than the other side's bound has
  // (an exclusive 99 leaves 100).
  const int open_digits =
      std::max({limits.integer, lo.value ? static_cast<int>(lo.value->integer.size()) + 1 : 0,
                hi.value ? static_cast<int>(hi.value->integer.size()) + 1 : 0});
  const Whole lowest =
      lo.value ? lowest_integer(*lo.value, lo.exclusive) : Whole{true, largest(open_digits)};
  const Whole highest =
      hi.value ? highest_integer(*hi.value, hi.exclusive) : Whole{false, largest(open_digits)};
  if (compare(lowest, highest) > 0) return std::nullopt;
  std::vector<std::string> alts;
  if (lowest.negative) {  // the negatives: magnitudes from |highest| (or 1) to |lowest|
    const std::string from = highest.negative ? highest.magnitude : "1";
    alts.push_back("-" + natural_range(from, lowest.magnitude));
  }
  if (!highest.negative)  // zero and the positives
    alts.push_back(natural_range(lowest.negative ? "0" : lowest.magnitude, highest.magnitude));
  return group(alts);
}

std::optional<std::string> number_range_regex(const RangeBound& lo, const RangeBound& hi,
                                              const DigitLimits& digit_limits, bool not_integer) {
  // Without a bound nothing is compared: the significant digits need not be a double's, unless
  // the fraction must survive as one (not_integer: 300.000000000000005 is the double 300).
  DigitLimits limits = digit_limits;
  if (!lo.value && !hi.value && !not_integer) limits.significant = limits.integer + limits.fraction;
  if (lo.value && hi.value) {
    const int c = compare(*lo.value, *hi.value);
    if (c > 0 || (c == 0 && (lo.exclusive || hi.exclusive))) return std::nullopt;
  }
  const Decimal zero;
  std::vector<std::string> alts;
  // The negatives, as magnitudes: from |hi| (or above 0) to |lo| (or open).
  const bool negatives = !lo.value || lo.value->negative;
  const bool hi_negative = hi.value && hi.value->negative;
  if (negatives) {
    Decimal from = zero;
    bool from_exclusive = true;
    if (hi_negative) {
      from = *hi.value;
      from.negative = false;
      from_exclusive = hi.exclusive;
    }
    std::optional<Decimal> to;
    if (lo.value) {
      to = *lo.value;
      to->negative = false;
    }
    if (std::optional<std::string> m =
            positive_range(from, from_exclusive, to, lo.exclusive, limits, not_integer))
      alts.push_back("-" + *m);
  }
  // Zero and the positives: from lo (or 0) to hi (or open).
  if (!hi_negative) {
    const bool from_lo = lo.value && !lo.value->negative;
    const Decimal from = from_lo ? *lo.value : zero;
    const bool from_exclusive = from_lo && lo.exclusive;
    std::optional<Decimal> to;
    if (hi.value) to = *hi.value;
    if (!(to && compare(*to, zero) == 0 && hi.exclusive))
      if (std::optional<std::string> p =
              positive_range(from, from_exclusive, to, hi.exclusive, limits, not_integer))
        alts.push_back(*p);
  }
  if (alts.empty()) return std::nullopt;
  return group(alts);
}

}  // namespace tpllama::grammar
