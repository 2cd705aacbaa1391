// The JSON numbers of a range as regex text (regex.h's syntax), digit by digit: the integers
// between two bounds, and the decimals between two bounds, inclusive or exclusive, each side
// open or not. JSON Schema's minimum, maximum, exclusiveMinimum and exclusiveMaximum compile
// through it; so does the bound on the digits of an unbounded number (a small model left to
// itself writes digits without end).
#pragma once

#include <optional>
#include <string>

namespace tpllama::grammar {

// A number in decimal, exactly: JSON's own text of it (an integer, a fraction, an exponent) read
// without rounding. The digits carry no leading zeros in the integer part and no trailing zeros
// in the fraction; zero is never negative.
struct Decimal {
  bool negative = false;
  std::string integer = "0";  // at least one digit
  std::string fraction;       // "" for a whole number

  // JSON number text ("-12", "0.25", "1.5e-3", "2E+2"); nullopt when it is not one, or its
  // exponent would write more than `max_digits` digits.
  static std::optional<Decimal> parse(const std::string& text, int max_digits = 400);
  // The exact value of a finite double (0.1 is 0.1000000000000000055511151231257827...).
  static Decimal exact(double v);
  bool whole() const { return fraction.empty(); }
  std::string text() const;  // as JSON writes it, without an exponent
};

// -1, 0 or 1 as a is below, equal to or above b.
int compare(const Decimal& a, const Decimal& b);

// One side of a range: absent (open), or a bound that is itself in the range or not.
struct RangeBound {
  std::optional<Decimal> value;
  bool exclusive = false;
};

// How many digits a number's parts may have where its range leaves them open (both sides of an
// unbounded integer; a fraction).
struct DigitLimits {
  int integer = 15;   // an unbounded side's integer part: 15 digits, exact in a double
  int fraction = 15;  // every fraction
  // A number with a fraction: its digits in all, the integer part's counted (jsonschema reads it
  // as a double, which holds 15 significant digits exactly).
  int significant = 15;
};

// The integers in [lo, hi] (each side open or exclusive), as JSON writes them: no leading zeros,
// no "-0". A bound that is not whole rounds inward. nullopt when the range holds no integer.
std::optional<std::string> integer_range_regex(const RangeBound& lo, const RangeBound& hi,
                                               const DigitLimits& limits = {});

// The numbers in [lo, hi] (each side open or exclusive), written -?INT(.FRAC)? with no exponent:
// a subset of JSON's numbers, each of the values of the range within the digit limits (and every
// value a bound names). not_integer: only those with a nonzero fraction (oneOf's "number but not
// integer"). nullopt when the range holds no such number.
std::optional<std::string> number_range_regex(const RangeBound& lo, const RangeBound& hi,
                                              const DigitLimits& limits = {},
                                              bool not_integer = false);

}  // namespace tpllama::grammar
