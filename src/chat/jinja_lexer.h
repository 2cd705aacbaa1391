// Splits template text into data and tag tokens as Jinja2's lexer does: whitespace control
// (`{%-`, `-%}`, `+`), trim_blocks, lstrip_blocks, comments and {% raw %} blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tpllama::jinja {

// Hugging Face renders chat templates with both on.
struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

enum class TokenKind {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // data, name, operator, or a string literal's value after escapes
  int line = 1;
  std::int64_t int_value = 0;
  double float_value = 0;
};

// Throws tpllama::Error "<origin> line N: <what>" for text Jinja2 would not lex.
std::vector<Token> tokenize(std::string_view source, const std::string& origin,
                            const LexOptions& options);

// The error every template problem throws: "<origin> line N: ..." with the offending values.
template <typename... Args>
[[noreturn]] void fail_at(const std::string& origin, int line, Args&&... args) {
  fail(origin, " line ", line, ": ", std::forward<Args>(args)...);
}

}  // namespace tpllama::jinja
