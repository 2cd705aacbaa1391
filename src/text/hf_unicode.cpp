// UTF-8 decoding and repair, Unicode classes and NFC for the tokenizer.json pipeline.
#include "text/hf_unicode.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "core/error.h"

namespace tpllama::hf {
namespace {

bool in(unsigned char c, unsigned lo, unsigned hi) {
  return c >= lo && c <= hi;
}

// Bounds of the second byte after a lead byte; continuation bytes after it are always 80..BF.
// Narrowing the second byte is what rules out overlongs, surrogates and code points > U+10FFFF.
bool second_byte_ok(unsigned char lead, unsigned char second) {
  if (lead == 0xE0) return in(second, 0xA0, 0xBF);
  if (lead == 0xED) return in(second, 0x80, 0x9F);
  if (lead == 0xF0) return in(second, 0x90, 0xBF);
  if (lead == 0xF4) return in(second, 0x80, 0x8F);
  return in(second, 0x80, 0xBF);
}

size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (in(lead, 0xC2, 0xDF)) return 2;
  if (in(lead, 0xE0, 0xEF)) return 3;
  if (in(lead, 0xF0, 0xF4)) return 4;
  return 0;
}

// Length of the longest prefix at s[i] that could still start a valid character (at least 1):
// the "maximal subpart" that one U+FFFD replaces.
size_t maximal_subpart(std::string_view s, size_t i) {
  auto lead = static_cast<unsigned char>(s[i]);
  size_t want = sequence_length(lead);
  if (want <= 1) return 1;
  size_t n = 1;
  while (n < want && i + n < s.size()) {
    auto c = static_cast<unsigned char>(s[i + n]);
    bool ok = n == 1 ? second_byte_ok(lead, c) : in(c, 0x80, 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t valid_char_length(std::string_view s, size_t i) {
  auto lead = static_cast<unsigned char>(s[i]);
  size_t want = sequence_length(lead);
  if (want == 0 || i + want > s.size()) return 0;
  return maximal_subpart(s, i) == want ? want : 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_char_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    size_t n = valid_char_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += maximal_subpart(s, i);
    }
  }
  return out;
}

char32_t next_char(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = sequence_length(c);
  if (n <= 1 || i + n > s.size()) {  // ASCII, or (never for valid input) a stray byte
    ++i;
    return c;
  }
  char32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

char32_t prev_char(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  size_t i = b;
  return next_char(s, i);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_word_char(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::string nfc(std::string_view s) {
  // Nothing below U+0300 decomposes or combines, so most Latin text needs no work. Every byte of
  // such text is below 0xCC, the lead byte of U+0300 (continuation bytes stop at 0xBF).
  bool below_u0300 = std::all_of(s.begin(), s.end(),
                                 [](char ch) { return static_cast<unsigned char>(ch) < 0xCC; });
  if (below_u0300) return std::string(s);
  utf8proc_uint8_t* mapped = nullptr;
  utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
      &mapped, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  if (n < 0) fail("NFC normalization failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

}  // namespace tpllama::hf
