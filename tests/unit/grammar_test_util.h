// What the grammar tests share: whether a grammar matches a whole text.
#pragma once

#include <string>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace tpllama::grammar {

inline bool full_match(const Grammar& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text) && m.can_end();
}

}  // namespace tpllama::grammar
