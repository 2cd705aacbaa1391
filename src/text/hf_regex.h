// A tokenizer.json pattern, {"Regex": ...} compiled by PCRE2 (UTF, UCP, JIT) or {"String": ...}
// matched literally, and its matches in a text. Hugging Face compiles these with Oniguruma, whose
// syntax PCRE2 shares for what tokenizer.json files use (\p{L}, (?i:...), (?!...)); \s \w \h are
// rewritten to Oniguruma's sets where PCRE2's differ.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"

namespace tpllama::hf {

struct Span {
  size_t begin = 0;
  size_t end = 0;
};

class Pattern {
 public:
  // {"Regex": "..."} or {"String": "..."}.
  static Pattern from_json(const Json& j, const std::string& where);
  static Pattern regex(const std::string& source, const std::string& where);
  static Pattern literal(std::string text);

  ~Pattern();
  Pattern(Pattern&&) noexcept;
  Pattern& operator=(Pattern&&) noexcept;

  // Appends the non-overlapping matches in text (valid UTF-8), left to right. After an empty match
  // the search resumes one character on, as Oniguruma's find_iter does. Not thread-safe: the match
  // data is reused from call to call.
  void find_all(std::string_view text, std::vector<Span>& out) const;
  // A {"String": ...} pattern: what it matches, always this text.
  bool is_literal() const { return compiled_ == nullptr; }
  const std::string& literal() const { return literal_; }

 private:
  struct Compiled;
  Pattern() = default;
  std::unique_ptr<Compiled> compiled_;  // null for a literal
  std::string literal_;
};

// text with every match of pattern replaced by content.
std::string replace_all(std::string_view text, const Pattern& pattern, const std::string& content);
// The same into out, false (out partial) as soon as it would pass max_bytes: the bound is kept
// while it is built, never checked after.
bool replace_all(std::string_view text, const Pattern& pattern, const std::string& content,
                 size_t max_bytes, std::string& out);

}  // namespace tpllama::hf
