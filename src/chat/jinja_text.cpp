// Python `str` semantics over UTF-8 bytes for the Jinja subset: see jinja_text.h.
#include "chat/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <utf8proc.h>

#include "chat/jinja_limits.h"
#include "core/utf8.h"

namespace tpllama::jinja::text {

bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    utf8::decode(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
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
      if (!drop(utf8::decode(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
      size_t at = start;
      if (!drop(utf8::decode(s, at))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

// Python's str case methods map with the full mappings; utf8proc has the simple ones, which are the
// same for every character but 103 (SpecialCasing.txt). Of those, ß is spelled out here ("SS").
enum class Case { kUpper, kLower, kTitle };

// Python's Uppercase and Lowercase but for the few Other_Uppercase / Other_Lowercase code points
// that have no case mapping (ª, modifier letters); a titlecase letter (ǅ) is neither.
bool is_upper_letter(char32_t c) {
  const auto cp = static_cast<utf8proc_int32_t>(c);
  const utf8proc_category_t cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_LU || (cat != UTF8PROC_CATEGORY_LT && utf8proc_tolower(cp) != cp);
}
bool is_lower_letter(char32_t c) {
  const auto cp = static_cast<utf8proc_int32_t>(c);
  const utf8proc_category_t cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_LL || (cat != UTF8PROC_CATEGORY_LT && utf8proc_toupper(cp) != cp);
}
bool is_cased(char32_t c) {
  return is_upper_letter(c) || is_lower_letter(c) ||
         utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LT;
}

void append_cased(std::string& out, char32_t c, Case to) {
  if (c == 0xdf && to != Case::kLower) {
    out += "SS";
    return;
  }
  const auto cp = static_cast<utf8proc_int32_t>(c);
  const utf8proc_int32_t mapped = to == Case::kUpper   ? utf8proc_toupper(cp)
                                  : to == Case::kLower ? utf8proc_tolower(cp)
                                                       : utf8proc_totitle(cp);
  utf8::append(out, static_cast<char32_t>(mapped));
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
  for (size_t i = 0; i < chars.size();) set.push_back(utf8::decode(chars, i));
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
      if (!is_space(utf8::decode(s, next))) break;
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
      if (is_space(utf8::decode(s, next))) break;
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
  for (size_t i = 0; i < s.size();) append_cased(out, utf8::decode(s, i), Case::kUpper);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_cased(out, utf8::decode(s, i), Case::kLower);
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    append_cased(out, utf8::decode(s, i), out.empty() ? Case::kTitle : Case::kLower);
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
    const bool cased = is_cased(c);
    append_cased(out, c, cased && !previous_cased ? Case::kTitle : Case::kLower);
    previous_cased = cased;
  }
  return out;
}

bool is_lower(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
    if (is_upper_letter(c)) return false;
    any = any || is_lower_letter(c);
  }
  return any;
}

bool is_upper(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::decode(s, i);
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
    const char32_t c = utf8::decode(s, i);
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
