// HfTokenizer on the tokenizer.json layout Mistral 7B (v0.1-v0.3) and Mixtral ship: SentencePiece
// BPE spelled as Hugging Face BPE (byte fallback, a Prepend + Replace normalizer or a Metaspace
// pre-tokenizer, [INST] / [/INST] as special added tokens). No real Mistral tokenizer.model or
// tokenizer.json can be installed here, so the test trains a SentencePiece model with Mistral's
// trainer settings, writes its tokenizer.json as Hugging Face's converter does (vocab in id order,
// merges ranked by the merged piece's score), and takes libsentencepiece's ids as the oracle.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/hf_tokenizer.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Ids = std::vector<int>;

const std::string kSpace = "\u2581";
const char* const kControls[] = {"[INST]", "[/INST]"};

// The UTF-8 characters of s.
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0)
      n = 4;
    else if (c >= 0xE0)
      n = 3;
    else if (c >= 0xC0)
      n = 2;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Merges of a SentencePiece BPE vocabulary: every split of a normal piece into two normal pieces,
// the merge of a higher-scored piece first (Hugging Face's SentencePieceExtractor).
Json merges_of(const sentencepiece::SentencePieceProcessor& sp) {
  std::unordered_map<std::string, int> normal;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (!sp.IsControl(id) && !sp.IsUnknown(id) && !sp.IsByte(id)) normal[sp.IdToPiece(id)] = id;
  }
  std::vector<std::tuple<float, int, int, std::string, std::string>> ranked;
  for (const auto& [piece, id] : normal) {
    const std::vector<std::string> chars = characters(piece);
    std::string left;
    for (size_t i = 0; i + 1 < chars.size(); ++i) {
      left += chars[i];
      const std::string right = piece.substr(left.size());
      auto l = normal.find(left), r = normal.find(right);
      if (l != normal.end() && r != normal.end())
        ranked.emplace_back(-sp.GetScore(id), l->second, r->second, left, right);
    }
  }
  std::sort(ranked.begin(), ranked.end());
  Json merges = Json::array();
  for (const auto& m : ranked) merges.push_back(std::get<3>(m) + " " + std::get<4>(m));
  return merges;
}

Json added_token(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Mistral's tokenizer.json around the model's pieces: `metaspace` false gives v0.1's legacy
// normalizer (each stretch between added tokens gets its own "▁"), true v0.3's Metaspace
// pre-tokenizer (prepend_scheme "first", no split).
Json mistral_tokenizer_json(const sentencepiece::SentencePieceProcessor& sp, bool metaspace) {
  Json vocab = Json::object();
  Json added = Json::array();
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    vocab[sp.IdToPiece(id)] = id;
    if (sp.IsControl(id) || sp.IsUnknown(id)) added.push_back(added_token(id, sp.IdToPiece(id)));
  }
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges_of(sp)}};
  Json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  Json j = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  if (metaspace) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", kSpace},
                          {"prepend_scheme", "first"},
                          {"split", false}};
  } else {
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpace}}, replace_space}}};
    j["pre_tokenizer"] = nullptr;
  }
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["model"] = model;
  return j;
}

// Texts without added tokens: prose, code, digits, whitespace runs, characters the small vocabulary
// lacks (byte fallback).
const std::vector<std::string> kTexts = {
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "line one\nline two\n\n  indented",
    "tab\tseparated\tvalues",
    "Numbers 1234567890 and 3.14159, 2024-05-17.",
    "camelCaseIdentifiers and snake_case_names",
    "Café, naïve, façade, Ångström",
    "你好，世界！ 日本語 한국어",
    "Emoji 😀👍🏽 and flags 🇫🇷",
    "def main():\n    return [x * 2 for x in range(10)]\n",
    "\"Quoted,\" she said; 'single' — dash…",
    "a",
    " ",
};

class HfTokenizerMistralLayout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tpllama_mistral_layout_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // Mistral's tokenizer.model trainer settings: BPE, identity normalizer, whitespace kept,
    // digits split, byte fallback, [INST] / [/INST] as control pieces (v0.3).
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (testing_util::kTestData / "tokenizer" / "english_sample.txt").string() +
        " --model_prefix=" + (dir_ / "m").string() +
        " --vocab_size=1200 --model_type=bpe --byte_fallback=true --split_digits=true"
        " --normalization_rule_name=identity --remove_extra_whitespaces=false"
        " --allow_whitespace_only_pieces=true --character_coverage=0.9999"
        " --control_symbols=[INST],[/INST] --hard_vocab_limit=false --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
    sp_ = new sentencepiece::SentencePieceProcessor();
    ASSERT_TRUE(sp_->Load((dir_ / "m.model").string()).ok());
  }
  static void TearDownTestSuite() {
    delete sp_;
    sp_ = nullptr;
    fs::remove_all(dir_);
  }

  static HfTokenizer candidate(bool metaspace) {
    const fs::path path = dir_ / (metaspace ? "v3.json" : "v1.json");
    std::ofstream(path) << mistral_tokenizer_json(*sp_, metaspace).dump();
    return HfTokenizer(path.string());
  }
  static Ids reference(const std::string& text) {
    Ids ids;
    EXPECT_TRUE(sp_->Encode(text, &ids).ok());
    return ids;
  }

  static fs::path dir_;
  static sentencepiece::SentencePieceProcessor* sp_;
};
fs::path HfTokenizerMistralLayout::dir_;
sentencepiece::SentencePieceProcessor* HfTokenizerMistralLayout::sp_ = nullptr;

TEST_F(HfTokenizerMistralLayout, LegacyNormalizerIdsEqualSentencePieces) {
  const HfTokenizer tok = candidate(false);
  for (const std::string& text : kTexts)
    EXPECT_EQ(tok.encode(text), reference(text)) << Json(text).dump();
}

TEST_F(HfTokenizerMistralLayout, MetaspaceIdsEqualSentencePieces) {
  // Hugging Face's Metaspace prepends "▁" only to text that does not already start with one, where
  // SentencePiece's dummy prefix always goes: " x" encodes as SentencePiece encodes "x".
  const HfTokenizer tok = candidate(true);
  int leading = 0;
  for (const std::string& text : kTexts) {
    if (text[0] != ' ') {
      EXPECT_EQ(tok.encode(text), reference(text)) << Json(text).dump();
    } else if (text.size() > 1) {
      EXPECT_EQ(tok.encode(text), reference(text.substr(1))) << Json(text).dump();
      ++leading;
    }
  }
  EXPECT_EQ(leading, 2);
}

TEST_F(HfTokenizerMistralLayout, ByteFallbackIsExercised) {
  // The CJK and emoji texts spell some characters as <0xNN> pieces on both sides.
  int bytes = 0;
  for (int id : reference("你好，世界！ 日本語 한국어 😀")) bytes += sp_->IsByte(id);
  EXPECT_GT(bytes, 0);
}

TEST_F(HfTokenizerMistralLayout, ControlTokensAreSingleIdsAndEachStretchIsEncodedAlone) {
  // SentencePiece spells "[INST]" as characters; Hugging Face matches the added token first and
  // the legacy normalizer encodes each stretch between added tokens as SentencePiece encodes it.
  const HfTokenizer tok = candidate(false);
  const int inst = sp_->PieceToId("[INST]"), end_inst = sp_->PieceToId("[/INST]");
  ASSERT_GT(inst, 2);
  ASSERT_GT(end_inst, 2);
  EXPECT_TRUE(tok.is_special(inst));
  Ids expected = {inst};
  for (int id : reference(" What is 2 + 2? ")) expected.push_back(id);
  expected.push_back(end_inst);
  for (int id : reference(" Four.")) expected.push_back(id);
  EXPECT_EQ(tok.encode("[INST] What is 2 + 2? [/INST] Four."), expected);
  EXPECT_NE(reference("[INST]"), Ids{inst}) << "SentencePiece itself never emits control ids";
}

TEST_F(HfTokenizerMistralLayout, DecodeGivesBackTheText) {
  for (bool metaspace : {false, true}) {
    const HfTokenizer tok = candidate(metaspace);
    for (const std::string& text : kTexts) {
      if (metaspace && text[0] == ' ') continue;  // other ids: see MetaspaceIdsEqualSentencePieces
      std::string decoded;
      for (int id : tok.encode(text)) decoded += tok.token_bytes(id);
      if (!decoded.empty() && decoded[0] == ' ') decoded.erase(0, tok.strip_leading_spaces());
      std::string reference_text;
      EXPECT_TRUE(sp_->Decode(reference(text), &reference_text).ok());
      EXPECT_EQ(decoded, reference_text) << Json(text).dump();
    }
  }
}

}  // namespace
}  // namespace tpllama
