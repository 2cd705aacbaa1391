// UTF-8 character lengths, the draining of complete characters from a byte buffer, repair, and
// decoding.
#include "core/utf8.h"

#include <algorithm>

namespace tpllama::utf8 {

namespace {

// The bytes of s (avail of them) that begin a valid character: 1 for ASCII, up to its length for a
// lead byte; 0 when s[0] cannot start one. *need gets the character's length.
int valid_prefix(const unsigned char* s, size_t avail, int* need) {
  const unsigned char c = s[0];
  *need = 1;
  if (c < 0x80) return 1;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    *need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    *need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    *need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  int k = 1;
  for (; k < *need && static_cast<size_t>(k) < avail; ++k) {
    const unsigned char b = s[k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
  }
  return k;
}

}  // namespace

int char_length(const unsigned char* s, size_t avail) {
  int need = 0;
  const int valid = valid_prefix(s, avail, &need);
  if (valid == need) return need;
  if (valid == 0 || static_cast<size_t>(valid) < avail)
    return -1;  // a byte that cannot continue it
  return 0;     // a viable prefix, cut short
}

void drain(std::string& buf, std::string& out, bool final, size_t* silent, Lossy lossy) {
  const auto* data = reinterpret_cast<const unsigned char*>(buf.data());
  size_t i = 0;
  while (i < buf.size()) {
    const int len = char_length(data + i, buf.size() - i);
    if (len > 0) {
      out.append(buf, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else if (len < 0 || final) {
      if (i >= *silent) out += kReplacementChar;
      int need = 0;
      const int subpart = valid_prefix(data + i, buf.size() - i, &need);
      i += lossy == Lossy::kPerMaximalSubpart ? static_cast<size_t>(std::max(1, subpart)) : 1;
    } else {
      break;
    }
  }
  *silent -= std::min(*silent, i);
  buf.erase(0, i);
}

size_t valid_length(std::string_view s, size_t i) {
  const int len = char_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
  return len > 0 ? static_cast<size_t>(len) : 0;
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = valid_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string repair(std::string_view s) {
  const auto* data = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const size_t len = valid_length(s, i);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += kReplacementChar;
      int need = 0;
      i += static_cast<size_t>(std::max(1, valid_prefix(data + i, s.size() - i, &need)));
    }
  }
  return out;
}

size_t count(std::string_view s) {
  size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xc0) != 0x80;
  return n;
}

char32_t decode(std::string_view s, size_t& i) {
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

char32_t decode_before(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  return decode(s, b);
}

void append(std::string& out, char32_t c) {
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

}  // namespace tpllama::utf8
