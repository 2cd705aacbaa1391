// The vocabulary trie's masks against the plain check of each token (Matcher::accepts, its bytes
// fed one by one): the same tokens allowed, at many places in a JSON Schema's grammar, over a
// vocabulary of every single byte (byte fallback) and 3000 seeded multi-byte tokens, some of them
// cutting UTF-8 characters in two.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

namespace tpllama::grammar {
namespace {

std::vector<std::string> vocabulary() {
  std::vector<std::string> v(3, "");  // control tokens: no bytes
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  const std::vector<std::string> pieces = {"{",   "}",    "\"",   ":", ",",   " ",  "\n", "name",
                                           "age", "tags", "[",    "]", "1",   "23", "-",  "é",
                                           "日",  "true", "null", "a", "Bob", "\\", "x"};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) t += pieces[rng() % pieces.size()];
    if (rng() % 10 == 0 && t.size() > 1) t.pop_back();  // a token ending inside a character
    if (rng() % 10 == 0 && t.size() > 1) t = t.substr(1);
    v.push_back(t);
  }
  v.push_back(v[300]);  // two ids with the same bytes
  return v;
}

TEST(TokenTrie, MasksAreTheTokensTheMatcherAccepts) {
  const std::vector<std::string> vocab = vocabulary();
  const TokenTrie trie(vocab);
  EXPECT_LT(trie.nodes(), 4 * vocab.size()) << "shared prefixes share nodes";
  const Grammar g = compile_json_schema(nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "Bob", "日本"]}}}, "required": ["name"]})"));
  const std::string text = R"({"name": "Bob é", "age": -23, "tags": ["a", "日本"]})";
  Matcher m(g);
  int checked = 0;
  for (size_t at = 0; at <= text.size(); ++at) {
    const TokenMask mask = trie.allowed(m);
    int allowed = 0;
    for (int t = 0; t < static_cast<int>(vocab.size()); ++t) {
      const bool want =
          !vocab[static_cast<size_t>(t)].empty() && m.accepts(vocab[static_cast<size_t>(t)]);
      ASSERT_EQ(allows(mask, t), want) << "token " << t << " after " << text.substr(0, at);
      allowed += want;
    }
    if (at < text.size()) {
      EXPECT_GT(allowed, 0) << "some token goes on after " << text.substr(0, at);
    }
    ++checked;
    if (at < text.size()) {
      ASSERT_TRUE(m.advance(static_cast<uint8_t>(text[at])));
    }
  }
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(checked, static_cast<int>(text.size()) + 1);
}

}  // namespace
}  // namespace tpllama::grammar
