// UTF-8 character lengths and the draining of complete characters from a byte buffer.
#include "text/utf8.h"

#include <algorithm>

namespace tpllama::utf8 {

int char_length(const unsigned char* s, size_t avail) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  int need = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= avail) return 0;
    const unsigned char b = s[k];
    const unsigned char k_lo = k == 1 ? lo : 0x80;
    const unsigned char k_hi = k == 1 ? hi : 0xBF;
    if (b < k_lo || b > k_hi) return -1;
  }
  return need;
}

void drain(std::string& buf, std::string& out, bool final, size_t* silent) {
  const auto* data = reinterpret_cast<const unsigned char*>(buf.data());
  size_t i = 0;
  while (i < buf.size()) {
    const int len = char_length(data + i, buf.size() - i);
    if (len > 0) {
      out.append(buf, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else if (len < 0 || final) {
      if (i >= *silent) out += kReplacementChar;
      ++i;
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
