// GBNF grammars: a number grammar written in GBNF matches what Python's re.fullmatch of the same
// language does on the regex fixture's texts; nesting, comments and line continuation; and what
// is refused, naming the line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar_test_util.h"

namespace tpllama::grammar {
namespace {

TEST(Gbnf, ANumberGrammarMatchesWhatPythonsRegexOfItMatches) {
  const Grammar g = compile_gbnf(R"G(# JSON's numbers
root ::= "-"? int frac? exp?
int  ::= "0" | [1-9] [0-9]*
frac ::= "." [0-9]+
exp  ::= [eE] [-+]? [0-9]+
)G");
  std::ifstream in(std::string(TPLLAMA_TEST_DATA_DIR) + "/grammar/regex_cases.json");
  ASSERT_TRUE(in);
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  int compared = 0;
  for (const auto& c : cases) {
    if (c["pattern"] != "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?") continue;
    for (const auto& t : c["texts"]) {
      EXPECT_EQ(full_match(g, t[0]), t[1].get<bool>()) << t[0];
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
}

TEST(Gbnf, GroupsNestAcrossLinesAndLiteralsTakeEscapes) {
  const Grammar g = compile_gbnf(R"G(root ::= item* "!"{1,2}
item ::= (
    "(" item* ")" |   # nested
    "\"\x41\u00e9\n" |
    [^()"\\!] .
  )
)G");
  EXPECT_TRUE(full_match(g, "!"));
  EXPECT_TRUE(full_match(g, "((x日))!!"));
  EXPECT_TRUE(full_match(g, "\"Aé\n!"));
  EXPECT_FALSE(full_match(g, "(x!"));
  EXPECT_FALSE(full_match(g, "!!!"));
  EXPECT_FALSE(full_match(g, "x!"));
}

// llama.cpp reads grammars written on Windows (issue 45): CRLF line ends, comments included.
TEST(Gbnf, CrlfLineEndsReadAsNewlines) {
  const Grammar g =
      compile_gbnf("root ::= item+ \"!\"\r\n# a comment\r\nitem ::= \"a\" |\r\n  \"b\"\r\n");
  EXPECT_TRUE(full_match(g, "ab!"));
  EXPECT_FALSE(full_match(g, "!"));
  EXPECT_FALSE(full_match(g, "a\r!"));
}

TEST(Gbnf, WhatItCannotReadIsRefusedNamingTheLine) {
  expect_refused(
      {
          {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2: expected rule 'root' defined twice"},
          {"start ::= \"a\"\n", "no rule 'root'"},
          {"root ::= item\n", "'item' is used but never defined"},
          {"root ::= root \"a\" | \"b\"\n", "'root' is left-recursive"},
          {"root ::= expr\nexpr ::= expr* \"a\"\n", "'expr' is left-recursive"},
          {"root ::= \"a\n", "'\"' closing a literal on its line"},
          {"root ::= [a-z\n", "']' closing a class on its line"},
          {"root ::= (\"a\"\n", "')' closing a group"},
          {"root = \"a\"\n", "'::=' after the rule name"},
          {"root ::= \"\\q\"\n", "a known escape, not '\\q'"},
          {"root ::= \"a\"{3,1}\n", "a repetition whose maximum is at least its minimum"},
      },
      [](const std::string& s) { compile_gbnf(s); });
  EXPECT_THROW(compile_gbnf(std::string(101, '(') + "root"), Error);
  EXPECT_THROW(compile_gbnf("root ::= " + std::string(2 << 20, 'a')), Error) << "past 1 MiB";
}

}  // namespace
}  // namespace tpllama::grammar
