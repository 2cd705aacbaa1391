// Checks on command-line values, with messages that name the value and the bound (CLI11's own
// PositiveNumber names a range up to DBL_MAX, and a check that throws ends the program instead of
// printing the mistake).
#pragma once

#include <CLI/CLI.hpp>

namespace tpllama {

// An integer, written in decimal digits without leading zeros (a leading '-' allowed), of at least
// `min`.
CLI::Validator at_least(long long min);
// An integer from 0 to 2^64 - 1 in decimal digits (a seed): CLI11 would clamp a larger one to the
// maximum without a word.
CLI::Validator unsigned_64();
// A finite number in [lo, hi].
CLI::Validator finite_in(double lo, double hi);

}  // namespace tpllama
