// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable character, so
// that a vocabulary of strings can spell any byte sequence (space is 'Ġ', newline 'Ċ').
#pragma once

#include <string>
#include <string_view>

namespace tpllama::hf {

// The character byte b stands for, as UTF-8.
const std::string& byte_to_char(unsigned char b);

// The byte that character c stands for, or -1 when c is not in the alphabet.
int char_to_byte(char32_t c);

// Appends the bytes piece's characters stand for and returns true; returns false and leaves out
// untouched when one character is not in the alphabet (Hugging Face then keeps the piece as is).
bool byte_level_decode(std::string_view piece, std::string& out);

}  // namespace tpllama::hf
