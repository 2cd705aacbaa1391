// UTF-8 character lengths and the draining of complete characters from a byte buffer.
#include "text/utf8.h"

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
  if (valid == 0 || static_cast<size_t>(valid) < avail) return -1;  // a byte that cannot continue it
  return 0;                                                          // a viable prefix, cut short
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

bool is_valid(const std::string& s) {
  const auto* data = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const int len = char_length(data + i, s.size() - i);
    if (len <= 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace tpllama::utf8
