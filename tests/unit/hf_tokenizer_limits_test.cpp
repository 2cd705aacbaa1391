// HfTokenizer on hostile tokenizer.json files and texts: ids far past the tokens a file holds and
// nesting past the JSON limit are refused at load, by name, before anything is built for them; a
// text that hits PCRE2's match limit or would outgrow the normalizer's bound is refused alone
// (hf::EncodeError), and the tokenizer goes on encoding the next.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "temp_files.h"
#include "text/encode_error.h"
#include "text/hf_tokenizer.h"

namespace tpllama {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int>;

// A BPE model over the printable ASCII characters: "<unk>" is id 0, character c is id c - 0x1F.
Json ascii_tokenizer() {
  Json vocab = {{"<unk>", 0}};
  for (int c = 0x20; c < 0x7F; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 0x1F;
  Json model = {
      {"type", "BPE"}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", Json::array()}};
  return {{"added_tokens", Json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},     {"decoder", nullptr},    {"model", model}};
}

std::string write_text(const std::string& text) {
  static std::atomic<int> counter{0};
  const std::string path =
      test_files::remove_at_exit(::testing::TempDir() + "hf_limits_" + std::to_string(::getpid()) +
                                 "_" + std::to_string(counter++) + ".json");
  std::ofstream(path) << text;
  return path;
}

// The message loading text fails with ("" when it loads).
std::string refusal(const std::string& path) {
  try {
    HfTokenizer tok(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message encoding text fails with, as an EncodeError ("" when it encodes).
std::string encode_refusal(const HfTokenizer& tok, const std::string& text) {
  try {
    tok.encode(text);
  } catch (const hf::EncodeError& e) {
    return e.what();
  }
  return "";
}

// 96 vocab entries ("<unk>" and 95 characters) and no added token: ids must stay below 96 + 1024.
TEST(HfTokenizerLimits, IdsFarPastTheTokensHeldAreRefusedBeforeTablesAreBuilt) {
  Json vocab_id = ascii_tokenizer();
  vocab_id["model"]["vocab"].erase("~");
  vocab_id["model"]["vocab"]["~"] = 50000000;
  const std::string path = write_text(vocab_id.dump());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(refusal(path),
            path +
                ": model: vocab entry '~' has id 50000000, but the file holds 96 tokens (vocab and "
                "added_tokens): ids must be below 1120 (gaps of 1024 ids at most)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "tables were built first";

  Json added_id = ascii_tokenizer();
  added_id["added_tokens"] = {{{"id", 1000000000}, {"content", "<s>"}, {"special", true}}};
  const std::string added_path = write_text(added_id.dump());
  EXPECT_EQ(refusal(added_path),
            added_path +
                ": added_tokens[0] has id 1000000000, but the file holds 97 tokens (vocab "
                "and added_tokens): ids must be below 1121 (gaps of 1024 ids at most)");
}

TEST(HfTokenizerLimits, IdsMayLeaveGapsUpToTheLimit) {
  Json j = ascii_tokenizer();
  j["added_tokens"] = {
      {{"id", 96 + 1024}, {"content", "<s>"}, {"special", true}}};  // 97 held: below 1121
  HfTokenizer tok(write_text(j.dump()));
  EXPECT_EQ(tok.vocab_size(), 1121);
  EXPECT_TRUE(tok.is_special(1120));
  EXPECT_FALSE(tok.has_token(500));
}

// A Sequence nested 30,000 deep (it took 5.1 GB): refused by the JSON nesting limit as read.
TEST(HfTokenizerLimits, ASequenceNestedPastTheJsonLimitIsRefusedAsRead) {
  const std::string inner =
      R"({"type":"Split","pattern":{"String":" "},"behavior":"Isolated","invert":false})";
  std::string deep;
  for (int i = 0; i < 30000; ++i) deep += R"({"type":"Sequence","pretokenizers":[)";
  deep += inner;
  for (int i = 0; i < 30000; ++i) deep += "]}";
  Json j = ascii_tokenizer();
  j["pre_tokenizer"] = "DEEP_SEQUENCE";
  std::string text = j.dump();
  const std::string head = text.substr(0, text.find("\"DEEP_SEQUENCE\""));
  text.replace(text.find("\"DEEP_SEQUENCE\""), 15, deep);
  const std::string path = write_text(text);
  // The file's object is level 1; each Sequence adds two (its object, its list): level 257 is the
  // 128th Sequence's list, the last byte of the 128th opening.
  const size_t at =
      head.size() + 128 * std::string(R"({"type":"Sequence","pretokenizers":[)").size() - 1;
  EXPECT_EQ(refusal(path),
            path + ": JSON nested deeper than 256 levels (at byte " + std::to_string(at) + ")");
}

// Issue 28's case: (a+)+$ over 5,000 'a' and a 'b' backtracks without end; PCRE2 stops at its
// default limit of 10,000,000 steps. That text is refused; the next is encoded.
TEST(HfTokenizerLimits, ARegexPastTheMatchLimitRefusesThatTextOnly) {
  Json j = ascii_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a+)+$"}}}, {"behavior", "Isolated"}};
  HfTokenizer tok(write_text(j.dump()));
  EXPECT_EQ(encode_refusal(tok, std::string(5000, 'a') + "b"),
            "the tokenizer's regex '(a+)+$' gave up at byte 0 of a 5001-byte text: match limit "
            "exceeded (the limit is "
            "10000000 steps)");
  EXPECT_EQ(tok.encode("ab"), (Ids{'a' - 0x1F, 'b' - 0x1F}));
}

// A Replace whose content is 100,000 bytes on a 5,001-byte text (it took 6.9 GB): past 16 times the
// text plus 4096 bytes = 84,112 bytes at the first match, so refused before it is built.
TEST(HfTokenizerLimits, ANormalizerOutgrowingItsBoundRefusesThatTextOnly) {
  Json j = ascii_tokenizer();
  j["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(100000, 'x')}};
  HfTokenizer tok(write_text(j.dump()));
  EXPECT_EQ(encode_refusal(tok, std::string(5000, 'a') + "b"),
            "the tokenizer's normalizer (step 1 of 1, Replace) would make a 5001-byte text more "
            "than 84112 bytes (16 "
            "times it plus 4096): not tokenized");
  EXPECT_EQ(tok.encode("bc"), (Ids{'b' - 0x1F, 'c' - 0x1F}));
}

// The bound refuses only what passes it: a text made 16 times longer is encoded.
TEST(HfTokenizerLimits, ANormalizerUpToItsBoundEncodes) {
  Json j = ascii_tokenizer();
  j["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(16, 'b')}};
  HfTokenizer tok(write_text(j.dump()));
  EXPECT_EQ(tok.encode(std::string(300, 'a')), Ids(300 * 16, 'b' - 0x1F));
}

// An added token's content is normalized at load: past the bound it is the file's fault, named so.
TEST(HfTokenizerLimits, AnAddedTokenOutgrowingTheNormalizerIsTheFilesFault) {
  Json j = ascii_tokenizer();
  j["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(100000, 'x')}};
  j["added_tokens"] = {{{"id", 96}, {"content", "aa"}, {"special", false}, {"normalized", true}}};
  const std::string path = write_text(j.dump());
  EXPECT_EQ(
      refusal(path),
      path +
          ": added_tokens[0]: its content normalized: the tokenizer's normalizer (step 1 of "
          "1, Replace) would make a 2-byte text more than 4128 bytes (16 times it plus 4096): "
          "not tokenized");
}

}  // namespace
}  // namespace tpllama
