// The one UTF-8 of the program: validity as streamed text needs it (the length of the character at
// a position, or that it is incomplete, or can never be valid; moving only complete characters out
// of a buffer), repair, and decoding to code points and back (tokenizers, the Jinja subset).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tpllama::utf8 {

inline constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 character at s given avail bytes; 0 when the bytes so far are a viable
// but incomplete prefix; -1 when s[0] can never start a valid character here. Overlongs,
// surrogates and code points above U+10FFFF are rejected at their second byte, so nothing that can
// never become valid is held back waiting for more bytes.
int char_length(const unsigned char* s, size_t avail);

// How ill-formed bytes become U+FFFD: one per byte (SentencePiece, Hugging Face's ByteFallback), or
// one per maximal subpart, the longest prefix of a valid character (Rust's from_utf8_lossy, which
// Hugging Face's ByteLevel decoder uses; also the Unicode standard's recommended practice).
enum class Lossy { kPerByte, kPerMaximalSubpart };

// Moves complete characters from buf to out; ill-formed bytes become U+FFFD as `lossy` says, except
// that the first *silent bytes are dropped instead (a prompt's incomplete last character: not the
// caller's text). A viable incomplete tail stays in buf unless final. *silent shrinks by the bytes
// that went.
void drain(std::string& buf, std::string& out, bool final, size_t* silent,
           Lossy lossy = Lossy::kPerByte);

// Length in bytes of the valid character at s[i]; 0 when the bytes there are not one (overlong,
// surrogate, above U+10FFFF, cut short, a stray continuation byte).
size_t valid_length(std::string_view s, size_t i);

// Whether the whole of s is valid UTF-8.
bool is_valid(std::string_view s);

// s with every maximal ill-formed subpart replaced by one U+FFFD: Rust's String::from_utf8_lossy
// (and the WHATWG decoder), i.e. what a Rust-side tokenizer would have been handed.
std::string repair(std::string_view s);

// Characters in s: its bytes but the continuation bytes (s valid UTF-8, or holding the lone
// surrogates decode reads). Python's len() of the string; OpenAI's text offsets.
size_t count(std::string_view s);

// Decodes the code point at s[i] and moves i past it. A lead byte and the continuation bytes it
// announces decode without char_length's range checks, so the lone surrogates a Python string may
// hold (the Jinja lexer writes "\ud800" as ED A0 80) decode back; a byte that starts no such
// sequence decodes as itself.
char32_t decode(std::string_view s, size_t& i);

// Decodes the character that ends at s[end) (s valid UTF-8); *begin receives where it starts.
char32_t decode_before(std::string_view s, size_t end, size_t* begin);

// Appends c as UTF-8 (a surrogate too, as decode reads it back).
void append(std::string& out, char32_t c);

}  // namespace tpllama::utf8
