// What the grammar tests share: whether a grammar matches a whole text.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace tpllama::grammar {

inline bool full_match(const Grammar& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text) && m.can_end();
}

// Each input refused by `compile` with a message holding its reason.
template <typename Compile>
void expect_refused(const std::vector<std::pair<std::string, std::string>>& cases,
                    Compile compile) {
  for (const auto& [input, why] : cases) {
    try {
      compile(input);
      ADD_FAILURE() << input << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << input << ": " << e.what();
    }
  }
}

}  // namespace tpllama::grammar
