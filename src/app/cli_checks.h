// Checks on command-line values, with messages that name the value and the bound (CLI11's own
// PositiveNumber names a range up to DBL_MAX, and a check that throws ends the program instead of
// printing the mistake).
#pragma once

#include <string>
#include <utility>
#include <vector>

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
// Any text but the empty one (what an empty value would mean instead is `instead`).
CLI::Validator not_empty(const std::string& instead);

// An option whose value is one of `choices`' spellings, parsed once into the value the spelling
// maps to. Help and mistakes read as CLI::IsMember over the spellings writes them
// ("--comm: tcp not in {auto,mpi,nccl}"); the default shown is the spelling of value's default.
template <typename T>
CLI::Option* add_choice(CLI::App& command, const std::string& flag, T& value,
                        const std::vector<std::pair<std::string, T>>& choices,
                        const std::string& help) {
  std::vector<std::string> spellings;
  std::string default_spelling;
  for (const auto& [spelling, choice] : choices) {
    spellings.push_back(spelling);
    if (choice == value && default_spelling.empty()) default_spelling = spelling;
  }
  auto parse = [&value, choices](const std::string& given) {
    for (const auto& [spelling, choice] : choices)
      if (spelling == given) value = choice;
  };
  return command.add_option_function<std::string>(flag, parse, help)
      ->default_str(default_spelling)
      ->check(CLI::IsMember(spellings));
}

}  // namespace tpllama
