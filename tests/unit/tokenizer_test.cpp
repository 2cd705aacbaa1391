// Tokenizer and IncrementalDetokenizer against the real stories260K tokenizer, with SentencePiece's
// own DecodeIds as the independent oracle for every decode.
#include "text/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "shipped_models.h"

namespace tpllama {
namespace {

std::string model_path() {
  return shipped::models_dir() + "/stories260K/tok512.model";
}

// Independent strict UTF-8 check (RFC 3629: no overlongs, surrogates or values above U+10FFFF).
bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      len = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path()))
      GTEST_FAIL() << "tokenizer model not found: " << model_path()
                   << " (it ships with the project in models/stories260K)";
    tok_ = std::make_unique<Tokenizer>(model_path());
    ASSERT_TRUE(sp_.Load(model_path()).ok());
  }

  std::string oracle(const std::vector<int>& ids) const {
    std::string text;
    EXPECT_TRUE(sp_.Decode(ids, &text).ok());
    return text;
  }

  int byte_id(int value) const {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", value);
    const int id = sp_.PieceToId(piece);
    EXPECT_TRUE(sp_.IsByte(id)) << piece;
    return id;
  }

  // Streams ids (after priming with prompt) checking every chunk is valid UTF-8; returns the text.
  std::string stream(const std::vector<int>& prompt, const std::vector<int>& ids) const {
    IncrementalDetokenizer detok(*tok_);
    detok.prime(prompt);
    std::string text;
    for (const int id : ids) {
      const std::string chunk = detok.push(id);
      EXPECT_TRUE(is_valid_utf8(chunk)) << "push(" << id << ") returned a partial character";
      text += chunk;
    }
    return text + detok.flush();
  }

  std::unique_ptr<Tokenizer> tok_;
  sentencepiece::SentencePieceProcessor sp_;  // the oracle: SentencePiece's own decoding
};

const std::vector<std::string> kSamples = {
    "Once upon a time",
    "The little dog ran to the park.",
    "Hello, world! 123",
    "caf\xC3\xA9 d\xC3\xA9j\xC3\xA0 vu, na\xC3\xAFve \xC3\xBC\xC3\xB1\xC3\xAE",  // café déjà vu,
                                                                                 // naïve üñî
    "\xE4\xB8\x96\xE7\x95\x8C",                                                  // 世界
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83"
    "\x88",                                         // 日本語のテキスト
    "party \xF0\x9F\x8E\x89\xF0\x9F\x9A\x80 time",  // party 🎉🚀 time
    "mixed \xE4\xB8\x96 and \xF0\x9F\x98\x80!",
};

TEST_F(TokenizerTest, EncodesLikeReference) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->encode("Once upon a time"), (std::vector<int>{403, 407, 261, 378}));
  EXPECT_EQ(tok_->encode("The little dog"), (std::vector<int>{291, 376, 400, 428}));
  EXPECT_TRUE(tok_->encode("").empty());
}

TEST_F(TokenizerTest, TokenBytes) {
  EXPECT_EQ(tok_->token_bytes(1), "");
  EXPECT_EQ(tok_->token_bytes(2), "");
  EXPECT_TRUE(tok_->is_control(1));
  EXPECT_TRUE(tok_->is_control(2));
  EXPECT_FALSE(tok_->is_control(403));
  EXPECT_EQ(tok_->token_bytes(0), " \xE2\x81\x87 ");
  EXPECT_EQ(tok_->token_bytes(403), " Once");
  EXPECT_EQ(tok_->token_bytes(byte_id(0x41)), "A");
  EXPECT_EQ(tok_->token_bytes(byte_id(0xE4)), "\xE4");
  EXPECT_THROW(tok_->token_bytes(-1), Error);
  EXPECT_THROW(tok_->token_bytes(512), Error);
  EXPECT_THROW(tok_->is_control(512), Error);
}

TEST_F(TokenizerTest, RoundTrips) {
  for (const auto& s : kSamples) EXPECT_EQ(tok_->decode(tok_->encode(s)), s) << s;
}

TEST_F(TokenizerTest, CjkUsesByteFallback) {
  const auto ids = tok_->encode("\xE4\xB8\x96\xE7\x95\x8C");
  bool any_byte = false;
  for (const int id : ids) any_byte = any_byte || sp_.IsByte(id);
  EXPECT_TRUE(any_byte);
  EXPECT_EQ(tok_->decode(ids), "\xE4\xB8\x96\xE7\x95\x8C");
}

TEST_F(TokenizerTest, StreamingMatchesDecodeIds) {
  for (const auto& s : kSamples) {
    std::vector<int> ids = {1};
    for (const int id : tok_->encode(s)) ids.push_back(id);
    ids.push_back(2);
    EXPECT_EQ(stream({}, ids), oracle(ids)) << s;
    EXPECT_EQ(tok_->decode(ids), oracle(ids)) << s;
  }
}

TEST_F(TokenizerTest, StreamingAfterPromptMatchesDecodeIdsSuffix) {
  const std::vector<int> prompt = {1, 403, 407};  // BOS "Once upon"
  for (const auto& s : kSamples) {
    const auto gen = tok_->encode(" " + s);
    std::vector<int> all = prompt;
    all.insert(all.end(), gen.begin(), gen.end());
    const std::string full = oracle(all);
    const std::string head = oracle(prompt);
    ASSERT_EQ(full.compare(0, head.size(), head), 0);
    EXPECT_EQ(stream(prompt, gen), full.substr(head.size())) << s;
  }
}

// Hand-built id streams with broken or unusual UTF-8; SentencePiece decides what is right.
TEST_F(TokenizerTest, MalformedBytesMatchDecodeIds) {
  const int e4 = byte_id(0xE4), b8 = byte_id(0xB8), x96 = byte_id(0x96);
  const std::vector<std::vector<int>> cases = {
      {e4, b8, x96},                                  // complete 世 from single bytes
      {e4, b8},                                       // truncated at the end
      {e4, b8, 403},                                  // truncated, then a normal piece
      {byte_id(0x80), 403},                           // stray continuation byte
      {byte_id(0xC0), byte_id(0x80)},                 // overlong lead
      {byte_id(0xED), byte_id(0xA0), byte_id(0x80)},  // surrogate
      {byte_id(0xF5), byte_id(0x80)},                 // lead beyond U+10FFFF
      {1, byte_id(0x41), 403},  // a byte piece first: the next piece keeps its space
      {1, 1, 403, 2, 407},      // control tokens in between
  };
  for (const auto& ids : cases) {
    EXPECT_EQ(tok_->decode(ids), oracle(ids));
    EXPECT_EQ(stream({}, ids), oracle(ids));
  }
}

// tok512.model stores its unk_surface as the escaped text " \\342\\201\\207 ", which DecodeIds
// copies literally; the tokenizer deliberately uses the real U+2047 surface instead.
TEST_F(TokenizerTest, UnknownUsesRealUnkSurface) {
  EXPECT_EQ(tok_->decode({0, 403}), " \xE2\x81\x87  Once");
  EXPECT_EQ(stream({1}, {0, 403}), " \xE2\x81\x87  Once");
}

TEST_F(TokenizerTest, HoldsBackIncompleteCharacterUntilComplete) {
  IncrementalDetokenizer detok(*tok_);
  detok.prime({1});
  EXPECT_EQ(detok.push(byte_id(0xF0)), "");
  EXPECT_EQ(detok.push(byte_id(0x9F)), "");
  EXPECT_EQ(detok.push(byte_id(0x98)), "");
  EXPECT_EQ(detok.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(detok.push(byte_id(0xE4)), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(detok.flush(), "");
}

// A prompt that ends inside a character: generated bytes that complete it give the character;
// otherwise the prompt's bytes are dropped, not shown as U+FFFD in the completion's text (the
// completion's own bad bytes still are).
TEST_F(TokenizerTest, APromptsIncompleteLastCharacterIsCompletedOrDropped) {
  {
    IncrementalDetokenizer detok(*tok_);
    detok.prime({1, byte_id(0xE4), byte_id(0xBD)});
    EXPECT_EQ(detok.push(byte_id(0xA0)), "\xE4\xBD\xA0");  // 你
  }
  {
    IncrementalDetokenizer detok(*tok_);
    detok.prime({1, byte_id(0xE4), byte_id(0xBD)});
    EXPECT_EQ(detok.push(403), " Once");
    EXPECT_EQ(detok.push(byte_id(0x80)), "\xEF\xBF\xBD");
  }
  {
    IncrementalDetokenizer detok(*tok_);
    detok.prime({1, byte_id(0xE4)});
    EXPECT_EQ(detok.push(byte_id(0xBD)), "");
    EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD") << "only the generated byte is the completion's";
  }
}

TEST_F(TokenizerTest, InvalidBytesAreNotHeldBack) {
  IncrementalDetokenizer detok(*tok_);
  detok.prime({1});
  EXPECT_EQ(detok.push(byte_id(0x80)), "\xEF\xBF\xBD");
  EXPECT_EQ(detok.push(byte_id(0xC0)), "\xEF\xBF\xBD");  // overlong lead can never complete
  EXPECT_EQ(detok.push(byte_id(0xE0)), "");
  EXPECT_EQ(detok.push(byte_id(0x80)), "\xEF\xBF\xBD\xEF\xBF\xBD");  // E0 80 is overlong
}

TEST_F(TokenizerTest, LeadingSpaceRule) {
  {
    IncrementalDetokenizer detok(*tok_);
    detok.prime({1});
    EXPECT_EQ(detok.push(403), "Once");
    EXPECT_EQ(detok.push(407), " upon");
  }
  {
    IncrementalDetokenizer detok(*tok_);
    detok.prime({1, 403});
    EXPECT_EQ(detok.push(407), " upon");
  }
  {
    IncrementalDetokenizer detok(*tok_);
    EXPECT_EQ(detok.push(403), "Once");  // no prompt at all
  }
}

TEST_F(TokenizerTest, PromptCharacterCompletedByGeneration) {
  IncrementalDetokenizer detok(*tok_);
  detok.prime({1, byte_id(0xE4)});
  EXPECT_EQ(detok.push(byte_id(0xB8)), "");
  EXPECT_EQ(detok.push(byte_id(0x96)), "\xE4\xB8\x96");
}

TEST(TokenizerLoad, BadPathThrowsNamingPath) {
  const std::string path = "/nonexistent/dir/missing_tok.model";
  try {
    Tokenizer tok(path);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Valid UTF-8 shows as itself; anything else as OpenAI's "bytes:\xNN" form, one escape per byte,
// so two byte-fallback tokens never share a top_logprobs key.
TEST(TokenDisplayText, PartialCharactersBecomeByteEscapes) {
  EXPECT_EQ(token_display_text("abc"), "abc");
  EXPECT_EQ(token_display_text("\xc3\xa9"), "\xc3\xa9");                  // é
  EXPECT_EQ(token_display_text("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");  // one 4-byte character
  EXPECT_EQ(token_display_text(""), "");
  EXPECT_EQ(token_display_text("\xe4"), "bytes:\\xe4");
  EXPECT_EQ(token_display_text("\xe4\xbd"), "bytes:\\xe4\\xbd");
  EXPECT_EQ(token_display_text("a\xff"), "bytes:\\x61\\xff");
  EXPECT_EQ(token_display_text("\xed\xa0\x80"),
            "bytes:\\xed\\xa0\\x80");  // a surrogate is not valid UTF-8
  EXPECT_NE(token_display_text("\xe4"), token_display_text("\xe5"));
}

// min_tokens: a lower bound on the tokens of a text from its bytes. Checked against SentencePiece's
// own encodings of ordinary text, space runs (which stories260K's normalizer collapses), and each
// piece's text repeated (the densest text a vocabulary allows).
TEST_F(TokenizerTest, MinTokensNeverExceedsSentencePiecesCount) {
  std::vector<std::string> texts = kSamples;
  texts.push_back(std::string(300, ' '));
  texts.push_back("  a" + std::string(200, ' ') + "b \n\t\t\t\t  c   ");
  texts.push_back("a" + std::string(200, '\n') + "b\t\t\t\tc");
  for (int id = 0; id < tok_->vocab_size(); ++id) {
    std::string dense;
    for (int k = 0; k < 20; ++k) dense += sp_.IdToPiece(id);
    texts.push_back(dense);
  }
  for (const std::string& text : texts) {
    const std::optional<size_t> least = tok_->min_tokens(text);
    ASSERT_TRUE(least.has_value())
        << "stories260K's tokenizer (identity rules, byte fallback) drops no text but spaces";
    std::vector<int> ids;
    ASSERT_TRUE(sp_.Encode(text, &ids).ok());
    EXPECT_LE(*least, ids.size()) << "'" << text << "' is " << text.size() << " bytes in "
                                  << ids.size() << " tokens";
  }
  // Not a bound so loose it refuses nothing: ten megabytes are far more than a 512-token context.
  std::string long_text;
  for (int i = 0; i < 1000000; ++i) long_text += "Once upon ";
  EXPECT_GT(tok_->min_tokens(long_text).value_or(0), 100000u);
  EXPECT_EQ(tok_->min_tokens(std::string(1000000, ' ')), 0u) << "spaces alone collapse to nothing";
}

// SentencePiece models trained here with each normalizer: identity keeps every byte, identity
// with remove_extra_whitespaces makes a run of spaces one, and NFKC (which removes control
// characters, among others) gives no bound.
TEST(SentencePieceBound, FollowsTheNormalizerOfModelsTrainedHere) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tpllama_sp_bound_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 50; ++i)
      corpus << "Once upon a time there was a little dog named Tom " << i
             << ".\nThe cat sat on the mat.\n";
  }
  const auto train = [&](const std::string& name, const std::string& options) {
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + dir + "/corpus.txt --model_prefix=" + dir + "/" + name +
        " --vocab_size=320 --model_type=bpe --byte_fallback=true --hard_vocab_limit=false "
        "--minloglevel=2 " +
        options);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return Tokenizer(dir + "/" + name + ".model");
  };
  const std::string spaced = "a" + std::string(400, ' ') + "b";
  const Tokenizer identity =
      train("identity", "--normalization_rule_name=identity --remove_extra_whitespaces=false");
  const Tokenizer collapse =
      train("collapse", "--normalization_rule_name=identity --remove_extra_whitespaces=true");
  const Tokenizer nfkc =
      train("nfkc", "--normalization_rule_name=nmt_nfkc --remove_extra_whitespaces=false");
  for (const Tokenizer* tok : {&identity, &collapse}) {
    ASSERT_TRUE(tok->min_tokens(spaced).has_value());
    EXPECT_LE(*tok->min_tokens(spaced), tok->encode(spaced).size());
  }
  EXPECT_GT(*identity.min_tokens(spaced), 3u) << "400 spaces take tokens";
  EXPECT_LE(*collapse.min_tokens(spaced), 1u) << "'a b' is all that is left";
  EXPECT_FALSE(nfkc.min_tokens(spaced).has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpllama
