// The byte <-> character tables of GPT-2's byte-level alphabet, built once.
#include "text/byte_level.h"

#include <array>

#include "core/utf8.h"

namespace tpllama::hf {
namespace {

struct Alphabet {
  std::array<char32_t, 256> char_of{};
  std::array<std::string, 256> utf8_of;
  std::array<int, 512> byte_of{};  // every character of the alphabet is below U+0200

  Alphabet() {
    // Printable Latin-1 bytes stand for themselves; the other 68 (controls, space, 0x7F-0xA0 and
    // the soft hyphen 0xAD) take U+0100 onwards, in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      char_of[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    byte_of.fill(-1);
    for (int b = 0; b < 256; ++b) {
      utf8::append(utf8_of[b], char_of[b]);
      byte_of[char_of[b]] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_char(unsigned char b) {
  return alphabet().utf8_of[b];
}

int char_to_byte(char32_t c) {
  return c < 512 ? alphabet().byte_of[c] : -1;
}

bool byte_level_decode(std::string_view piece, std::string& out) {
  std::string bytes;
  bytes.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    int b = char_to_byte(utf8::decode(piece, i));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
  }
  out += bytes;
  return true;
}

}  // namespace tpllama::hf
