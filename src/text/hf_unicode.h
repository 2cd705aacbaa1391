// The Unicode the tokenizer.json pipeline needs beyond PCRE2: UTF-8 decoding and repair, the
// White_Space and word-character classes Hugging Face's added-token rules use, and NFC (utf8proc).
// Internal to src/text/hf_*; the streaming UTF-8 of decoded text lives in text/utf8.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tpllama::hf {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length in bytes of the valid UTF-8 character starting at s[i], or 0 when the bytes there are not
// one (overlong, surrogate, above U+10FFFF, truncated, a stray continuation byte).
size_t valid_char_length(std::string_view s, size_t i);

bool is_valid_utf8(std::string_view s);

// s with every maximal invalid subsequence replaced by one U+FFFD: Rust's String::from_utf8_lossy
// (and the WHATWG decoder), i.e. what a Rust-side tokenizer would have been handed.
std::string repair_utf8(std::string_view s);

// Decodes the character at s[i] (s must be valid UTF-8) and advances i past it.
char32_t next_char(std::string_view s, size_t& i);

// Decodes the character that ends at s[end) (s valid UTF-8); *begin receives where it starts.
char32_t prev_char(std::string_view s, size_t end, size_t* begin);

void append_utf8(std::string& out, char32_t c);

// Unicode White_Space: what Rust's char::is_whitespace and regex \s accept.
bool is_white_space(char32_t c);

// Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t c);

// Canonical composition (NFC) of valid UTF-8.
std::string nfc(std::string_view s);

}  // namespace tpllama::hf
