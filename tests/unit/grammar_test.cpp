// Byte grammars and their matcher: regexes against Python's re.fullmatch over 1024 texts
// (tests/data/grammar/regex_cases.json, written by scripts/oracles/regex_cases.py), what the
// regex reader refuses by name, and the grammar checks (left recursion, size).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar_test_util.h"

namespace tpllama::grammar {
namespace {

TEST(Regex, MatchesWhatPythonsFullmatchMatches) {
  std::ifstream in(std::string(TPLLAMA_TEST_DATA_DIR) + "/grammar/regex_cases.json");
  ASSERT_TRUE(in) << "tests/data/grammar/regex_cases.json is missing";
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  ASSERT_GE(cases.size(), 30u);
  size_t matched = 0, texts = 0;
  for (const auto& c : cases) {
    const std::string pattern = c["pattern"];
    const Grammar g = compile_regex(pattern);
    for (const auto& t : c["texts"]) {
      const std::string text = t[0];
      const bool both = t[1].get<bool>() && t[2].get<bool>();  // re.ASCII's and Unicode's
      const bool ascii = std::all_of(text.begin(), text.end(),
                                     [](char ch) { return static_cast<unsigned char>(ch) < 0x80; });
      const bool got = full_match(g, text);
      if (ascii) {
        EXPECT_EQ(got, both) << "pattern " << pattern << " text '" << text << "'";
      } else {  // \D \W \S keep to ASCII: a subset of what both readings match
        EXPECT_TRUE(!got || both) << "pattern " << pattern << " text '" << text << "'";
      }
      matched += got;
      ++texts;
    }
  }
  EXPECT_GT(matched, texts / 10) << "the fixture must hold matches and misses";
  EXPECT_LT(matched, texts - texts / 10);
}

// Byte by byte: a prefix of a match may go on, and a byte that can lead nowhere is refused
// without changing the state.
TEST(Regex, APrefixGoesOnAndAWrongByteIsRefused) {
  const Grammar g = compile_regex("\\d{3}-\\d{4}");
  Matcher m(g);
  EXPECT_TRUE(m.advance("555"));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.advance('x'));
  EXPECT_TRUE(m.accepts("-1"));
  EXPECT_TRUE(m.advance("-1234"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.can_continue());
  // A character split over tokens: its bytes one at a time.
  const Grammar e = compile_regex("é");
  Matcher me(e);
  EXPECT_TRUE(me.advance('\xC3'));
  EXPECT_FALSE(me.can_end());
  EXPECT_TRUE(me.advance('\xA9'));
  EXPECT_TRUE(me.can_end());
}

// A repetition does not deepen the parse: a million bytes of a* and of (ab|c)* match.
TEST(Regex, LongRepetitionsMatch) {
  const Grammar g = compile_regex("(ab|c)*d");
  std::string text;
  for (int i = 0; i < 200000; ++i) text += i % 3 ? "ab" : "c";
  EXPECT_TRUE(full_match(g, text + "d"));
  EXPECT_FALSE(full_match(g, text + "a"));
}

// A lazy quantifier matches the texts its greedy one does; only a second quantifier is refused.
TEST(Regex, ALazyQuantifierIsOneQuantifier) {
  for (const char* lazy : {"a*?b", "a+?b", "a??b", "a{1,3}?b"}) {
    const Grammar g = compile_regex(lazy);
    EXPECT_TRUE(full_match(g, "ab")) << lazy;
    EXPECT_FALSE(full_match(g, "b") && std::string(lazy).find('+') != std::string::npos) << lazy;
  }
}

TEST(Regex, WhatItDoesNotSupportIsRefusedByName) {
  expect_refused(
      {
          {"(a)\\1", "the escape \\1"},
          {"(?=a)a", "a group of kind '(?='"},
          {"(?i)a", "a group of kind '(?i'"},
          {"a^b", "an anchor inside the pattern"},
          {"a$b", "an anchor inside the pattern"},
          {"a*+", "a possessive quantifier"},
          {"\\bword", "the escape \\b"},
          {"\\p{L}", "the escape \\p"},
          {"[[:alpha:]]", "a POSIX class"},
          {"a{100001}", "a repetition count above 10000"},
          {"a{3,2}", "max below min"},
          {"*a", "a quantifier with nothing to repeat"},
          {"a**", "a quantifier of a quantifier (multiple repeat) at offset 2"},
          {"a{2}{3}", "a quantifier of a quantifier (multiple repeat) at offset 4"},
          {"a*??", "a quantifier of a quantifier (multiple repeat) at offset 3"},
          {"(?P<x>a)(?P=x)", "a backreference '(?P=name)'"},
          {"(ab", "a missing ')'"},
          {"ab)", "an unmatched ')'"},
          {"[ab", "an unterminated '['"},
          {"[z-a]", "a range out of order"},
      },
      [](const std::string& s) { compile_regex(s); });
  std::string deep(300, '(');
  deep += "a" + std::string(300, ')');
  EXPECT_THROW(compile_regex(deep), Error) << "nesting past 200";
  EXPECT_THROW(compile_regex(std::string(70 * 1024, 'a')), Error) << "a pattern past 64 KiB";
  // A repetition that would build more symbols than the grammar may hold.
  std::string wide;
  for (int i = 0; i < 11; ++i) wide += "[a-z]{10000}";
  EXPECT_THROW(compile_regex(wide, {}, {100000, 1 << 16}), Error) << "110 000 symbols";
}

TEST(Grammar, LeftRecursionIsRefusedAndTailLoopsAreNot) {
  GrammarBuilder b;
  const uint32_t a = b.rule("expr");
  b.add_alternative(a, {GrammarBuilder::ref(a), b.byte('+'), b.byte('1')});
  b.add_alternative(a, {b.byte('1')});
  try {
    b.build(a);
    ADD_FAILURE() << "left recursion accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'expr' is left-recursive"), std::string::npos)
        << e.what();
  }
  // Right recursion is a grammar's repetition: accepted, and matched.
  GrammarBuilder r;
  const uint32_t list = r.rule("list");
  r.add_alternative(list, {r.byte('1'), r.byte('+'), GrammarBuilder::ref(list)});
  r.add_alternative(list, {r.byte('1')});
  const Grammar g = r.build(list);
  EXPECT_TRUE(full_match(g, "1+1+1"));
  EXPECT_FALSE(full_match(g, "1+"));
  // A rule used but never given alternatives.
  GrammarBuilder u;
  const uint32_t root = u.rule("root");
  u.add_alternative(root, {GrammarBuilder::ref(u.rule("value"))});
  EXPECT_THROW(u.build(root), Error);
}

// Balanced brackets: a grammar no regex can be, matched with its nesting on the stack.
TEST(Grammar, NestingIsMatchedOnTheStack) {
  GrammarBuilder b;
  const uint32_t s = b.rule("s");
  b.add_alternative(s, {b.byte('('), GrammarBuilder::ref(s), b.byte(')'), GrammarBuilder::ref(s)});
  b.add_alternative(s, {});
  const Grammar g = b.build(s);
  EXPECT_TRUE(full_match(g, ""));
  EXPECT_TRUE(full_match(g, "(()(()))()"));
  EXPECT_FALSE(full_match(g, "(()"));
  EXPECT_FALSE(full_match(g, "())("));
  std::string deep = std::string(5000, '(') + std::string(5000, ')');
  EXPECT_TRUE(full_match(g, deep));
}

}  // namespace
}  // namespace tpllama::grammar
