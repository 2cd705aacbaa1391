// Regular expressions as byte grammars: the pattern matches a whole text (Python's re.fullmatch),
// over code points encoded as UTF-8. The syntax is Python's (and JSON Schema's ECMA-262, where
// they agree): literals, `.` (any code point but newline), classes `[...]` with ranges and
// negation, `\d \w \s` and their negations (ASCII, as re.ASCII reads them: `\D \W \S`, and a
// negated class holding a class escape, match only ASCII, where Python's Unicode reading and
// ECMA-262's agree with re.ASCII's), escapes, groups
// `(...)`, `(?:...)` and `(?P<name>...)`, alternation, and the quantifiers `* + ? {n} {n,} {,m}
// {n,m}` (lazy ones match the same texts). `^` at the start and `$` at the end are accepted.
// Anything else (back references, look-around, flags, anchors inside, possessive quantifiers,
// Unicode classes) is refused by name, never read as something else.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace tpllama::grammar {

struct RegexOptions {
  // The text is a JSON string's content, written without escapes: '"', '\\' and the control
  // characters are left out of classes and `.`, and a literal one is refused.
  bool json_string = false;
  size_t max_pattern_bytes = 64 * 1024;
  int max_depth = 200;    // nested groups and quantifiers
  int max_count = 10000;  // the largest n or m of a {n,m}
};

// The pattern as a symbol of `builder` (a rule matching exactly its texts). Throws Error naming
// the construct and its offset when the pattern is refused.
GrammarBuilder::Symbol add_regex(GrammarBuilder& builder, std::string_view pattern,
                                 const RegexOptions& limits = {});

// A grammar of the pattern alone.
Grammar compile_regex(std::string_view pattern, const RegexOptions& limits = {},
                      const GrammarLimits& grammar_limits = {});

}  // namespace tpllama::grammar
