// The Jinja subset's case methods (utf8proc's mappings) beyond the scripts chat text mostly uses,
// against what CPython 3.11's str.upper / lower / title / capitalize / isupper / islower return
// for the same strings (checked there by hand).
#include <gtest/gtest.h>

#include "chat/jinja_text.h"

namespace tpllama::jinja::text {
namespace {

TEST(JinjaCase, UpperAndLowerOutsideLatinGreekAndCyrillic) {
  EXPECT_EQ(upper("\xD5\xA1"), "\xD4\xB1");          // Armenian ա → Ա
  EXPECT_EQ(upper("\xE1\xBC\x80"), "\xE1\xBC\x88");  // Greek Extended ἀ → Ἀ
  EXPECT_EQ(upper("\xEA\x99\x81"), "\xEA\x99\x80");  // Cyrillic Extended-B ꙁ → Ꙁ
  EXPECT_EQ(lower("\xE1\xBA\x9E"), "\xC3\x9F");      // ẞ → ß
  EXPECT_EQ(lower("\xE2\x92\xB6"), "\xE2\x93\x90");  // Ⓐ → ⓐ
  EXPECT_EQ(upper("Stra\xC3\x9F"
                  "e"),
            "STRASSE");  // ß → SS, as before
}

TEST(JinjaCase, TitleUsesTheTitlecaseLetter) {
  // ǆ (U+01C6): upper Ǆ (U+01C4), title ǅ (U+01C5).
  EXPECT_EQ(upper("\xC7\x86"
                  "emal"),
            "\xC7\x84"
            "EMAL");
  EXPECT_EQ(title("\xC7\x86"
                  "emal"),
            "\xC7\x85"
            "emal");
  EXPECT_EQ(capitalize("\xC7\x86"
                       "emal"),
            "\xC7\x85"
            "emal");
  EXPECT_EQ(title("stra\xC3\x9F"
                  "e"),
            "Stra\xC3\x9F"
            "e");
}

TEST(JinjaCase, WhichLettersAreUpperAndLower) {
  EXPECT_TRUE(is_lower("\xD5\xA1"));      // ա
  EXPECT_TRUE(is_upper("\xD4\xB1"));      // Ա
  EXPECT_TRUE(is_upper("\xE2\x92\xB6"));  // Ⓐ, an uppercase symbol
  EXPECT_FALSE(is_upper("\xC7\x85"));     // ǅ, titlecase: neither
  EXPECT_FALSE(is_lower("\xC7\x85"));
  EXPECT_TRUE(is_lower("\xC3\x9F"));  // ß
  EXPECT_FALSE(
      is_lower("Stra\xC3\x9F"
               "e"));
}

}  // namespace
}  // namespace tpllama::jinja::text
