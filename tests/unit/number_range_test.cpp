// Ranges of JSON numbers as regexes (grammar/number_range.h), against brute force: every integer
// from -1200 to 1200 and every decimal of up to three fraction digits in a window around the bounds
// is matched exactly when it lies in the range (compared as exact decimals), over many ranges,
// inclusive and exclusive, open and closed, with whole and fractional bounds.
#include "grammar/number_range.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "grammar/regex.h"
#include "grammar_test_util.h"

namespace tpllama::grammar {
namespace {

// Exact value comparison of small decimals as integers of thousandths.
long long thousandths(const std::string& text) {
  const Decimal d = *Decimal::parse(text);
  std::string f = d.fraction + "000";
  const long long v = std::stoll(d.integer) * 1000 + std::stoll(f.substr(0, 3));
  return d.negative ? -v : v;
}

bool in_range(long long v, const RangeBound& lo, const RangeBound& hi) {
  if (lo.value) {
    const long long b = thousandths(lo.value->text());
    if (lo.exclusive ? v <= b : v < b) return false;
  }
  if (hi.value) {
    const long long b = thousandths(hi.value->text());
    if (hi.exclusive ? v >= b : v > b) return false;
  }
  return true;
}

RangeBound bound(const char* text, bool exclusive = false) {
  RangeBound b;
  if (text) b.value = Decimal::parse(text);
  b.exclusive = exclusive;
  return b;
}

// The texts a number of thousandths v is written as: without a fraction where whole, and with
// one to three fraction digits (trailing zeros too: "1.50" is 1.5).
std::vector<std::string> spellings(long long v) {
  const bool negative = v < 0;
  const long long m = negative ? -v : v;
  const std::string sign = negative ? "-" : "";
  std::vector<std::string> out;
  char frac[8];
  std::snprintf(frac, sizeof frac, "%03lld", m % 1000);
  const std::string integer = std::to_string(m / 1000);
  if (m % 1000 == 0 && m != 0) out.push_back(sign + integer);
  if (m == 0) out.push_back("0");
  for (int digits = 1; digits <= 3; ++digits) {
    const std::string f(frac, static_cast<size_t>(digits));
    if (std::string(frac).substr(static_cast<size_t>(digits)).find_first_not_of('0') !=
        std::string::npos)
      continue;            // would drop nonzero digits
    if (m == 0) continue;  // "-0.0" and "0.0" aside: zero is written "0"
    out.push_back(sign + integer + "." + f);
  }
  return out;
}

TEST(NumberRange, DecimalsParseExactly) {
  EXPECT_EQ(Decimal::parse("1.5e-3")->text(), "0.0015");
  EXPECT_EQ(Decimal::parse("-2E+2")->text(), "-200");
  EXPECT_EQ(Decimal::parse("0.10")->text(), "0.1");
  EXPECT_EQ(Decimal::parse("-0")->text(), "0");
  EXPECT_EQ(Decimal::parse("007")->text(), "7");
  EXPECT_FALSE(Decimal::parse("1e999").has_value()) << "more digits than asked for";
  EXPECT_FALSE(Decimal::parse("x").has_value());
  EXPECT_EQ(compare(*Decimal::parse("-1.5"), *Decimal::parse("-1.25")), -1);
  EXPECT_EQ(compare(*Decimal::parse("2.50"), *Decimal::parse("2.5")), 0);
  // A double's exact value: 0.1 is 3602879701896397 / 2^55.
  EXPECT_EQ(Decimal::exact(0.1).text(),
            "0.1000000000000000055511151231257827021181583404541015625");
  EXPECT_EQ(Decimal::exact(1e23).text(), "99999999999999991611392");
  EXPECT_EQ(Decimal::exact(-2.5).text(), "-2.5");
  EXPECT_EQ(Decimal::exact(-0.0).text(), "0");
  EXPECT_EQ(Decimal::exact(5e-324).fraction.size(), 1074u) << "2^-1074";
}

TEST(NumberRange, IntegersAreExactlyThoseInTheRange) {
  const std::vector<std::pair<RangeBound, RangeBound>> ranges = {
      {bound("0"), bound("120")},     {bound("-15"), bound("120")},
      {bound("-999"), bound("-100")}, {bound("1", true), bound("99", true)},
      {bound("0.5"), bound("10.5")},  {bound("-10.5"), bound("-0.5")},
      {bound("7"), bound(nullptr)},   {bound(nullptr), bound("-3")},
      {bound("1000"), bound("1000")}, {bound("-1.5", true), bound("1.5", true)},
      {bound("199"), bound("1101")},  {bound(nullptr), bound(nullptr)},
  };
  for (const auto& [lo, hi] : ranges) {
    const std::optional<std::string> regex = integer_range_regex(lo, hi, {4, 3});
    ASSERT_TRUE(regex.has_value());
    const Grammar g = compile_regex(*regex);
    for (long long v = -1200; v <= 1200; ++v) {
      const std::string text = std::to_string(v);
      ASSERT_EQ(full_match(g, text), in_range(v * 1000, lo, hi)) << text << " against " << *regex;
    }
    EXPECT_FALSE(full_match(g, "-0")) << *regex;
    EXPECT_FALSE(full_match(g, "007")) << *regex;
  }
  EXPECT_FALSE(integer_range_regex(bound("5"), bound("4")).has_value());
  EXPECT_FALSE(integer_range_regex(bound("0.2"), bound("0.8")).has_value());
  const Grammar open = compile_regex(*integer_range_regex(bound(nullptr), bound(nullptr), {3, 0}));
  EXPECT_TRUE(full_match(open, "-999"));
  EXPECT_FALSE(full_match(open, "1000")) << "an open side has at most the limit's digits";
}

TEST(NumberRange, DecimalsAreExactlyThoseInTheRange) {
  const std::vector<std::pair<RangeBound, RangeBound>> ranges = {
      {bound("0"), bound("1")},
      {bound("-1.25"), bound("2.5")},
      {bound("0.1", true), bound("0.35")},
      {bound("-3.75"), bound("-3.7", true)},
      {bound("1.5"), bound(nullptr)},
      {bound(nullptr), bound("-0.005")},
      {bound("0", true), bound(nullptr)},
      {bound("-2"), bound("0", true)},
      {bound("12.345"), bound("12.345")},
      {bound(nullptr), bound(nullptr)},
      {bound("-0.5"), bound("0.5")},
      {bound("9.99"), bound("10.01")},
  };
  for (const auto& [lo, hi] : ranges)
    for (const bool not_integer : {false, true}) {
      const std::optional<std::string> regex = number_range_regex(lo, hi, {2, 3}, not_integer);
      ASSERT_TRUE(regex.has_value());
      const Grammar g = compile_regex(*regex);
      for (long long v = -20000; v <= 20000; ++v) {
        const bool whole = v % 1000 == 0;
        const bool expected = in_range(v, lo, hi) && !(not_integer && whole);
        for (const std::string& text : spellings(v)) {
          const bool is_whole_text = text.find('.') == std::string::npos;
          // A whole value written "1.0" is an integer to JSON Schema: not_integer refuses it too.
          ASSERT_EQ(full_match(g, text), expected && !(not_integer && is_whole_text))
              << text << " in " << (lo.value ? lo.value->text() : "open") << ".."
              << (hi.value ? hi.value->text() : "open") << (not_integer ? " not integer" : "")
              << ": " << *regex;
        }
      }
      EXPECT_FALSE(full_match(g, "1e3"));
      EXPECT_FALSE(full_match(g, "-0"));
    }
  EXPECT_FALSE(number_range_regex(bound("1"), bound("1", true)).has_value());
  EXPECT_FALSE(number_range_regex(bound("2"), bound("1")).has_value());
}

// An open side reaches past the digit limit where the other bound does (minimum 1e20 is not
// empty), and a number with a fraction keeps to the significant digits a double holds.
TEST(NumberRange, DigitLimitsBendToTheBoundsAndToADouble) {
  const Grammar big = compile_regex(*integer_range_regex(bound("1e20"), bound(nullptr), {3, 0}));
  EXPECT_TRUE(full_match(big, "100000000000000000000"));
  EXPECT_TRUE(full_match(big, "999999999999999999999"));
  EXPECT_FALSE(full_match(big, "99999999999999999999"));
  const Grammar above99 =
      compile_regex(*integer_range_regex(bound("99", true), bound(nullptr), {1, 0}));
  EXPECT_TRUE(full_match(above99, "100")) << "an exclusive 99 leaves 100 past one digit";
  const Grammar low = compile_regex(*integer_range_regex(bound(nullptr), bound("-1e5"), {3, 0}));
  EXPECT_TRUE(full_match(low, "-100000"));
  EXPECT_FALSE(full_match(low, "-99999"));
  const Grammar wide =
      compile_regex(*number_range_regex(bound("123456789012"), bound(nullptr), {15, 15, 15}));
  EXPECT_TRUE(full_match(wide, "123456789012.123"));
  EXPECT_FALSE(full_match(wide, "123456789012.1234")) << "16 significant digits";
  EXPECT_FALSE(full_match(wide, "0.123456789012345")) << "below the minimum";
  const Grammar small = compile_regex(*number_range_regex(bound(nullptr), bound(nullptr)));
  EXPECT_TRUE(full_match(small, "0.000000000000001"));
  EXPECT_FALSE(full_match(small, "0.0000000000000001")) << "16 fraction digits";
  EXPECT_TRUE(full_match(small, "-999999999999999"));
  EXPECT_FALSE(full_match(small, "1000000000000000")) << "16 integer digits";
  EXPECT_TRUE(full_match(small, "99999999999999.99")) << "no bound: no double compared";
  const Grammar above = compile_regex(*number_range_regex(bound("0"), bound(nullptr)));
  EXPECT_FALSE(full_match(above, "99999999999999.99")) << "16 significant digits";
  EXPECT_TRUE(full_match(above, "9999999999999.99"));
}

}  // namespace
}  // namespace tpllama::grammar
