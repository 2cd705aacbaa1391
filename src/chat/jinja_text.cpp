// Python `str` semantics over UTF-8 bytes for the Jinja subset: see jinja_text.h.
#include "chat/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja_limits.h"

namespace tpllama::jinja::text {

bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

char32_t decode_utf8(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const int extra = b0 >= 0xf8 ? 0 : b0 >= 0xf0 ? 3 : b0 >= 0xe0 ? 2 : b0 >= 0xc0 ? 1 : 0;
  if (extra == 0 || i + extra >= s.size()) {
    ++i;
    return b0;
  }
  char32_t c = b0 & (0x3f >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) {
      ++i;
      return b0;
    }
    c = (c << 6) | (b & 0x3f);
  }
  i += extra + 1;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    decode_utf8(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xc0) != 0x80;
  return n;
}

namespace {

// Byte range [begin, end) of `s` left after dropping leading/trailing code points that `drop`
// accepts.
template <typename Pred>
std::string strip_if(std::string_view s, bool left, bool right, Pred drop) {
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!drop(decode_utf8(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
      size_t at = start;
      if (!drop(decode_utf8(s, at))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

// Simple case mappings of Latin-1, Latin Extended-A, Greek, Cyrillic and full-width Latin, the
// scripts chat text mostly uses; other code points keep their case.
char32_t upper_of(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (c == 0xb5) return 0x39c;
  if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x131) return 'I';
    if (c == 0x17f) return 'S';
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    const bool lower_is_even = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    return (c % 2 == 0) == lower_is_even ? c - 1 : c;
  }
  if ((c >= 0x3b1 && c <= 0x3c1) || (c >= 0x3c3 && c <= 0x3cb)) return c - 32;
  if (c == 0x3c2) return 0x3a3;
  if (c == 0x3ac) return 0x386;
  if (c >= 0x3ad && c <= 0x3af) return c - 37;
  if (c == 0x3cc) return 0x38c;
  if (c == 0x3cd || c == 0x3ce) return c - 63;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  if (c >= 0xff41 && c <= 0xff5a) return c - 32;
  return c;
}

char32_t lower_of(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17f) return c;
    const bool upper_is_odd = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    return (c % 2 == 1) == upper_is_odd ? c + 1 : c;
  }
  if ((c >= 0x391 && c <= 0x3a1) || (c >= 0x3a3 && c <= 0x3ab)) return c + 32;
  if (c == 0x386) return 0x3ac;
  if (c >= 0x388 && c <= 0x38a) return c + 37;
  if (c == 0x38c) return 0x3cc;
  if (c == 0x38e || c == 0x38f) return c + 63;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  if (c >= 0xff21 && c <= 0xff3a) return c + 32;
  return c;
}

// Letters that have a case; ß and ĸ are lowercase letters without a single-letter uppercase.
bool is_cased(char32_t c) {
  return upper_of(c) != c || lower_of(c) != c || c == 0xdf || c == 0x138;
}
bool is_upper_letter(char32_t c) {
  return lower_of(c) != c;
}
bool is_lower_letter(char32_t c) {
  return upper_of(c) != c || c == 0xdf || c == 0x138;
}

// Appends the code point in the case `upper` asks for; ß uppercases to "SS", as in Python.
void append_cased(std::string& out, char32_t c, bool upper) {
  if (upper && c == 0xdf) {
    out += "SS";
    return;
  }
  append_utf8(out, upper ? upper_of(c) : lower_of(c));
}

// Python's str.isprintable() for non-ASCII code points, approximated by the separators, format
// characters, C1 controls and private-use areas that chat text is likely to contain.
bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  if (c <= 0xa0 || c == 0xad || c == 0x061c || c == 0x1680 || c == 0x180e || c == 0xfeff) {
    return false;
  }
  if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f))
    return false;
  if (c == 0x3000 || (c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfff9 && c <= 0xfffb)) return false;
  if (c >= 0xe0000 && c <= 0xe007f) return false;
  return c < 0xf0000;
}

}  // namespace

std::string strip(std::string_view s, bool left, bool right) {
  return strip_if(s, left, right, is_space);
}

std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<char32_t> set;
  for (size_t i = 0; i < chars.size();) set.push_back(decode_utf8(chars, i));
  return strip_if(s, left, right, [&](char32_t c) {
    for (const char32_t x : set)
      if (x == c) return true;
    return false;
  });
}

std::vector<std::string> split_whitespace(std::string_view s, std::int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size()) {
      size_t next = i;
      if (!is_space(decode_utf8(s, next))) break;
      i = next;
    }
  };
  skip_space();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      out.emplace_back(s.substr(i));
      return out;
    }
    const size_t start = i;
    while (i < s.size()) {
      size_t next = i;
      if (is_space(decode_utf8(s, next))) break;
      i = next;
    }
    out.emplace_back(s.substr(start, i - start));
    skip_space();
  }
  return out;
}

std::vector<std::string> split(std::string_view s, std::string_view sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.empty())
    return {std::string(s)};  // Python refuses; callers check, this only avoids a hang
  size_t start = 0;
  while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
    const size_t at = s.find(sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to,
                    std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (from.empty()) {
    for (const std::string_view cp : code_points(s)) {
      if (count < 0 || done < count) out += to, ++done;
      out += cp;
      check_bytes(out.size());  // one copy of `to` per character
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start)).append(to);
    check_bytes(out.size());  // a long `to` for a short `from` multiplies the size
    start = at + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_cased(out, decode_utf8(s, i), true);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_cased(out, decode_utf8(s, i), false);
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_cased(out, decode_utf8(s, i), out.empty());
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode_utf8(s, i);
    const bool cased = is_cased(c);
    append_cased(out, c, cased && !previous_cased);
    previous_cased = cased;
  }
  return out;
}

bool is_lower(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode_utf8(s, i);
    if (is_upper_letter(c)) return false;
    any = any || is_lower_letter(c);
  }
  return any;
}

bool is_upper(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode_utf8(s, i);
    if (is_lower_letter(c)) return false;
    any = any || is_upper_letter(c);
  }
  return any;
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = decode_utf8(s, i);
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (printable(c)) {
      out += s.substr(start, i - start);
    } else {
      const char* format = c <= 0xff ? "\\x%02x" : c <= 0xffff ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof buf, format, static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_at = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, e_at))
    if (c != '.') digits += c;
  const int exponent = std::atoi(std::string(sci.substr(e_at + 1)).c_str());
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0)
      return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    const auto int_len = static_cast<size_t>(exponent + 1);
    if (digits.size() <= int_len)
      return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buf;
}

}  // namespace tpllama::jinja::text
