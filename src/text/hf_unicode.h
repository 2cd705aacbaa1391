// The Unicode the tokenizer.json pipeline needs beyond PCRE2 and UTF-8 (core/utf8.h): the
// White_Space and word-character classes Hugging Face's added-token rules use, and NFC (utf8proc).
// Internal to src/text/hf_*.
#pragma once

#include <string>
#include <string_view>

namespace tpllama::hf {

// Unicode White_Space: what Rust's char::is_whitespace and regex \s accept.
bool is_white_space(char32_t c);

// Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t c);

// Canonical composition (NFC) of valid UTF-8.
std::string nfc(std::string_view s);

}  // namespace tpllama::hf
