// The command-line value checks: what they let through and the message for what they refuse.
#include "app/cli_checks.h"

#include <gtest/gtest.h>

namespace tpllama {
namespace {

// The validator's verdict on a value: empty when accepted, else its message.
std::string verdict(const CLI::Validator& v, std::string value) {
  return v(value);
}

// An empty --served-model-name fell back to the directory's name without a word (issue 45).
TEST(NotEmpty, RefusesOnlyTheEmptyValueSayingWhatLeavingItOutGives) {
  EXPECT_EQ(verdict(not_empty("the model directory's name"), "llama"), "");
  EXPECT_EQ(verdict(not_empty("the model directory's name"), ""),
            "is empty: give a value, or leave the flag out for the model directory's name");
}

TEST(AtLeast, AcceptsIntegersFromTheBoundUp) {
  EXPECT_EQ(verdict(at_least(1), "1"), "");
  EXPECT_EQ(verdict(at_least(1), "4096"), "");
  EXPECT_EQ(verdict(at_least(0), "0"), "");
  EXPECT_EQ(verdict(at_least(0), "18446744073709551615"), "");  // the largest seed
  EXPECT_EQ(verdict(at_least(-5), "-5"), "");
}

TEST(AtLeast, NamesTheBoundAndTheValueItRefuses) {
  EXPECT_EQ(verdict(at_least(1), "0"), "must be at least 1, got 0");
  EXPECT_EQ(verdict(at_least(1), "-4"), "must be at least 1, got -4");
  EXPECT_EQ(verdict(at_least(0), "-1"), "must be at least 0, got -1");
  EXPECT_EQ(verdict(at_least(0), "-99999999999999999999"),
            "must be at least 0, got -99999999999999999999");
  EXPECT_EQ(verdict(at_least(-5), "-6"), "must be at least -5, got -6");
}

TEST(AtLeast, RefusesLeadingZerosWhichWouldReadAsOctal) {
  EXPECT_EQ(verdict(at_least(1), "010"), "write 010 without leading zeros");
  EXPECT_EQ(verdict(at_least(-5), "-07"), "write -07 without leading zeros");
}

TEST(AtLeast, RefusesWhatIsNotAnInteger) {
  for (const char* bad : {"", "-", "1.5", "abc", " 8", "+2", "8 ", "1e3", "0x10"})
    EXPECT_EQ(verdict(at_least(1), bad), std::string("expected an integer, got '") + bad + "'")
        << bad;
}

TEST(Unsigned64, AcceptsEverySeedAndRefusesWhatWouldBeClamped) {
  EXPECT_EQ(verdict(unsigned_64(), "0"), "");
  EXPECT_EQ(verdict(unsigned_64(), "18446744073709551615"), "");  // 2^64 - 1
  EXPECT_EQ(verdict(unsigned_64(), "18446744073709551616"),
            "must be at most 18446744073709551615 (2^64 - 1), got 18446744073709551616");
  EXPECT_EQ(verdict(unsigned_64(), "99999999999999999999999"),
            "must be at most 18446744073709551615 (2^64 - 1), got 99999999999999999999999");
  EXPECT_EQ(verdict(unsigned_64(), "-1"),
            "expected an integer from 0 to 18446744073709551615, got '-1'");
  EXPECT_EQ(verdict(unsigned_64(), "1.5"),
            "expected an integer from 0 to 18446744073709551615, got '1.5'");
  EXPECT_EQ(verdict(unsigned_64(), "07"), "write 07 without leading zeros");
}

TEST(FiniteIn, AcceptsTheClosedInterval) {
  EXPECT_EQ(verdict(finite_in(0, 1), "0"), "");
  EXPECT_EQ(verdict(finite_in(0, 1), "1"), "");
  EXPECT_EQ(verdict(finite_in(0, 1), "0.25"), "");
  EXPECT_EQ(verdict(finite_in(0, 1e6), "1e3"), "");
}

TEST(FiniteIn, RefusesOutsideValuesNonNumbersAndNonFiniteValues) {
  EXPECT_EQ(verdict(finite_in(0, 1), "2"), "must be in [0, 1], got 2");
  EXPECT_EQ(verdict(finite_in(1e-12, 1), "0"), "must be in [1e-12, 1], got 0");
  EXPECT_EQ(verdict(finite_in(0, 1e6), "nan"), "must be in [0, 1e+06], got nan");
  EXPECT_EQ(verdict(finite_in(0, 1e6), "inf"), "must be in [0, 1e+06], got inf");
  for (const char* bad : {"", "abc", "0.5x", "1e400"})
    EXPECT_EQ(verdict(finite_in(0, 1e6), bad), std::string("expected a number, got '") + bad + "'")
        << bad;
}

}  // namespace
}  // namespace tpllama
