// core/utf8.h, the program's one UTF-8: repair against the Unicode Standard's own examples of
// U+FFFD substitution (chapter 3.9, "U+FFFD Substitution of Maximal Subparts"), validity at the
// edges of the well-formed byte table (Table 3-7), and decoding and encoding against code points
// worked out by hand.
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "core/utf8.h"

namespace tpllama {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string fffd(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += kFffd;
  return out;
}

// The pieces one after another (appended: GCC 12's -Wrestrict misreads a chain of + here).
std::string join(std::initializer_list<std::string> pieces) {
  std::string out;
  for (const std::string& p : pieces) out += p;
  return out;
}

TEST(Utf8Repair, OneReplacementPerMaximalSubpartAsTheStandardShows) {
  // a, F1 80 80 (cut short), E1 80 (cut short), C2 (cut short), b, 80, c, 80, BF, d.
  EXPECT_EQ(utf8::repair("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            join({"a", fffd(3), "b", fffd(1), "c", fffd(2), "d"}));
  // Non-shortest forms: no byte of them starts a maximal subpart longer than one.
  EXPECT_EQ(utf8::repair("\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41"), join({fffd(8), "A"}));
  // Surrogates.
  EXPECT_EQ(utf8::repair("\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41"), join({fffd(8), "A"}));
  // Beyond U+10FFFF, and a byte that is never UTF-8.
  EXPECT_EQ(utf8::repair("\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42"),
            join({fffd(5), "A", fffd(2), "B"}));
  // Truncated sequences, each one subpart.
  EXPECT_EQ(utf8::repair("\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41"), join({fffd(4), "A"}));
}

TEST(Utf8Repair, ValidTextIsUnchanged) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a é € 😀
  EXPECT_EQ(utf8::repair(text), text);
  EXPECT_TRUE(utf8::is_valid(text));
}

TEST(Utf8Validity, TheEdgesOfTheWellFormedTable) {
  EXPECT_EQ(utf8::valid_length("\x7F", 0), 1u);
  EXPECT_EQ(utf8::valid_length("\xC2\x80", 0), 2u);          // U+0080, the first two-byte one
  EXPECT_EQ(utf8::valid_length("\xC1\xBF", 0), 0u);          // overlong U+007F
  EXPECT_EQ(utf8::valid_length("\xE0\xA0\x80", 0), 3u);      // U+0800
  EXPECT_EQ(utf8::valid_length("\xE0\x9F\xBF", 0), 0u);      // overlong U+07FF
  EXPECT_EQ(utf8::valid_length("\xED\x9F\xBF", 0), 3u);      // U+D7FF
  EXPECT_EQ(utf8::valid_length("\xED\xA0\x80", 0), 0u);      // U+D800, a surrogate
  EXPECT_EQ(utf8::valid_length("\xF4\x8F\xBF\xBF", 0), 4u);  // U+10FFFF
  EXPECT_EQ(utf8::valid_length("\xF4\x90\x80\x80", 0), 0u);  // U+110000
  EXPECT_EQ(utf8::valid_length("x\xE2\x82", 1), 0u);         // cut short
  EXPECT_EQ(utf8::valid_length("x\xE2\x82\xAC", 1), 3u);     // at an offset
  EXPECT_FALSE(utf8::is_valid("ab\x80"));
  EXPECT_FALSE(utf8::is_valid("\xE2\x82"));
  EXPECT_TRUE(utf8::is_valid(""));
}

TEST(Utf8Decode, CodePointsOfEveryLength) {
  const std::string s = "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // A é € 😀
  size_t i = 0;
  EXPECT_EQ(utf8::decode(s, i), U'A');
  EXPECT_EQ(i, 1u);
  EXPECT_EQ(utf8::decode(s, i), char32_t{0xE9});
  EXPECT_EQ(i, 3u);
  EXPECT_EQ(utf8::decode(s, i), char32_t{0x20AC});
  EXPECT_EQ(i, 6u);
  EXPECT_EQ(utf8::decode(s, i), char32_t{0x1F600});
  EXPECT_EQ(i, 10u);
}

TEST(Utf8Decode, ASurrogateComesBackAndAStrayByteIsItself) {
  size_t i = 0;
  EXPECT_EQ(utf8::decode("\xED\xA0\x80", i), char32_t{0xD800});  // as a Python string may hold it
  EXPECT_EQ(i, 3u);
  i = 0;
  EXPECT_EQ(utf8::decode("\x80z", i), char32_t{0x80});
  EXPECT_EQ(i, 1u);
  i = 0;
  EXPECT_EQ(utf8::decode("\xC3(", i), char32_t{0xC3});  // a lead byte without its continuation
  EXPECT_EQ(i, 1u);
  i = 0;
  EXPECT_EQ(utf8::decode("\xE2\x82", i), char32_t{0xE2});  // cut short
  EXPECT_EQ(i, 1u);
}

TEST(Utf8Decode, TheCharacterBeforeAnEnd) {
  const std::string s =
      "a\xE2\x82\xAC"
      "b";  // a € b
  size_t begin = 99;
  EXPECT_EQ(utf8::decode_before(s, 4, &begin), char32_t{0x20AC});
  EXPECT_EQ(begin, 1u);
  EXPECT_EQ(utf8::decode_before(s, 5, &begin), U'b');
  EXPECT_EQ(begin, 4u);
  EXPECT_EQ(utf8::decode_before(s, 1, &begin), U'a');
  EXPECT_EQ(begin, 0u);
}

TEST(Utf8Append, EncodesEveryLength) {
  std::string out;
  utf8::append(out, U'A');
  utf8::append(out, 0xE9);
  utf8::append(out, 0x20AC);
  utf8::append(out, 0x1F600);
  utf8::append(out, 0xD800);  // a surrogate too, as decode reads it back
  EXPECT_EQ(out, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xED\xA0\x80");
}

}  // namespace
}  // namespace tpllama
