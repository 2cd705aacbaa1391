// The streaming detokenizer over Meta's Llama 3 tokenizer.json: pushed one id at a time it never
// hands out half a character, and what it hands out equals the whole decode and the JavaScript
// oracle's decode (tests/data/tokenizer/llama3_expected.jsonl, made by tests/oracles), ill-formed
// byte sequences included.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "oracles.h"
#include "text/tokenizer.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string llama3_tokenizer_path() {
  return oracles::lenml_file("TPLLAMA_LLAMA3_TOKENIZER", "tokenizer-llama3");
}

class Llama3Detokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(llama3_tokenizer_path())) tok_ = new Tokenizer(llama3_tokenizer_path());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr)
      GTEST_SKIP() << llama3_tokenizer_path() << oracles::kMissing << " (TPLLAMA_LLAMA3_TOKENIZER)";
  }
  // Pushes ids one at a time (after priming with prompt), checking that every chunk is whole UTF-8.
  static std::string stream(const std::vector<int>& ids, const std::vector<int>& prompt = {}) {
    IncrementalDetokenizer detok(*tok_);
    detok.prime(prompt);
    std::string text;
    for (int id : ids) {
      const std::string chunk = detok.push(id);
      EXPECT_TRUE(utf8::is_valid(chunk)) << "push(" << id << ") gave part of a character";
      text += chunk;
    }
    return text + detok.flush();
  }
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(Llama3Detokenizer, StreamingEqualsTheWholeDecodeAndTheOraclesOnTheCorpus) {
  std::ifstream in(fs::path(__FILE__).parent_path() / "../data/tokenizer/llama3_expected.jsonl");
  ASSERT_TRUE(in) << "tests/data/tokenizer/llama3_expected.jsonl is missing";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    const std::vector<int> ids = j["ids"].get<std::vector<int>>();
    const std::string expected = j["decoded"];
    EXPECT_EQ(stream(ids), expected) << j["text"];
    EXPECT_EQ(tok_->decode(ids), expected) << j["text"];
    // A prompt's ids before them decide nothing here (byte-level BPE has no leading-space rule).
    EXPECT_EQ(stream(ids, {791, 4062}), expected) << j["text"];
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

// Ill-formed byte runs decode as the oracle decodes them: a U+FFFD per maximal subpart (the
// expected strings are the JavaScript oracle's decode of these byte-level ids).
TEST_F(Llama3Detokenizer, IllFormedBytesBecomeOneReplacementPerMaximalSubpart) {
  struct Case {
    std::vector<int> ids;
    std::string oracle;
  };
  const Case cases[] = {
      {{160, 121, 64},
       "\xEF\xBF\xBD"
       "a"},                         // E4 BD a
      {{160, 121}, "\xEF\xBF\xBD"},  // E4 BD, cut short
      {{172, 253, 246, 222, 222, 64},
       "\xF0\x9F\x98\x80\xEF\xBF\xBD"
       "a"},                                                      // 😀 80 a
      {{127, 7}, "\xEF\xBF\xBD("},                                // C3 28
      {{169, 254, 222}, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // ED A0 80: a surrogate
      {{187, 64},
       "\xEF\xBF\xBD"
       "a"},  // FF a
  };
  for (const Case& c : cases) {
    EXPECT_EQ(stream(c.ids), c.oracle);
    EXPECT_EQ(tok_->decode(c.ids), c.oracle);
  }
}

TEST_F(Llama3Detokenizer, SpecialTokensHaveNoTextButTheirSpellingInLogprobs) {
  const int eot = 128009;  // <|eot_id|> in Meta's Llama 3 vocabulary
  EXPECT_TRUE(tok_->is_control(eot));
  EXPECT_EQ(tok_->token_bytes(eot), "");
  EXPECT_EQ(tok_->piece(eot), "<|eot_id|>");
  EXPECT_EQ(stream({9906, eot, 1917}), "Hello world");
  // The text a rendered chat prompt holds: its special tokens become their ids.
  EXPECT_EQ(tok_->encode_with_special_tokens("<|start_header_id|>user<|end_header_id|>"),
            (std::vector<int>{128006, 882, 128007}));
}

}  // namespace
}  // namespace tpllama
