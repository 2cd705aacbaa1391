// JSON Schema's string constraints as regexes (regex.h's syntax, over the decoded string): a
// `pattern`, which is searched for, as a regex over the whole string; the `format`s' texts; and
// the lengths a compiled regex's texts can have, which the schema reader compares with minLength
// and maxLength.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace tpllama::grammar {

// A JSON Schema pattern as a regex over a whole string: a side without its anchor may have any
// text there; `any` is what that text is made of. python_dollar: a final '$' also matches before
// a last newline (Python's re.search, as python3-jsonschema validates). Throws for an anchor beside
// a top-level '|'.
std::string searched(const std::string& pattern, const std::string& any,
                     bool python_dollar = false);

// The string formats, by name, with their regexes: texts every validator takes (RFC 3339's and RFC
// 4122's forms, dates that exist).
const std::vector<std::pair<std::string, std::string>>& schema_formats();

// The fewest and the most characters of the texts a grammar matches (a byte set of UTF-8 lead
// bytes is one, of continuation bytes none); most -1: no bound. nullopt where a byte set mixes
// them.
std::optional<std::pair<int, int>> char_range(const Grammar& g);

}  // namespace tpllama::grammar
