// UTF-8 validity as streamed text needs it: the length of the character at a position (or that it
// is incomplete, or can never be valid), and moving only complete characters out of a buffer.
#pragma once

#include <cstddef>
#include <string>

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
void drain(std::string& buf, std::string& out, bool final, size_t* silent, Lossy lossy = Lossy::kPerByte);

// Whether the whole of s is valid UTF-8.
bool is_valid(const std::string& s);

}  // namespace tpllama::utf8
