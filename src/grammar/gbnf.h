// GBNF, llama.cpp's grammar format, as a byte grammar: the format vLLM's guided_grammar takes here
// (and llama.cpp users write). Rules `name ::= alternatives`, one per line (a group, or a line
// ending in `|`, goes on over newlines); items are "literals" (escapes \n \r \t \\ \" \xNN \uNNNN
// \UNNNNNNNN), [classes] (ranges, ^ negation, the same escapes), rule names, (groups), `.` (any
// character), with the quantifiers * + ? {m} {m,} {m,n}; `#` starts a comment. The grammar
// starts at `root`. A rule used and not defined, left recursion, and anything else unreadable are
// refused, naming the line.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace tpllama::grammar {

struct GbnfLimits {
  size_t max_bytes = 1 << 20;  // the grammar's text
  int max_depth = 100;         // nested groups
  GrammarLimits grammar;
};

Grammar compile_gbnf(std::string_view text, const GbnfLimits& limits = {});

}  // namespace tpllama::grammar
