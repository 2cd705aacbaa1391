// HfTokenizer on small tokenizer.json files written here, whose ids follow by hand from their
// vocab (id = position in the list) and merges: each component of the format, and the refusals.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "temp_files.h"
#include "text/hf_tokenizer.h"
#include "text/tokenizer.h"

namespace tpllama {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int>;

// A BPE model whose token i is vocab[i].
Json bpe(const std::vector<std::string>& vocab, Json merges = Json::array(),
         const Json& options = Json::object()) {
  Json v = Json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  Json m = {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", v},
            {"merges", std::move(merges)}};
  m.update(options);
  return m;
}

Json tokenizer_json(Json model, const Json& parts = Json::object()) {
  Json j = {{"version", "1.0"},          {"truncation", nullptr},
            {"padding", nullptr},        {"added_tokens", Json::array()},
            {"normalizer", nullptr},     {"pre_tokenizer", nullptr},
            {"post_processor", nullptr}, {"decoder", nullptr},
            {"model", std::move(model)}};
  j.update(parts);
  return j;
}

Json added(int id, const std::string& content, const Json& flags = Json::object()) {
  Json t = {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", false}, {"special", true}};
  t.update(flags);
  return t;
}

std::string write(const Json& j) {
  // ctest runs each test in its own process, several at once: the pid keeps their files apart.
  static std::atomic<int> counter{0};
  const std::string path =
      test_files::remove_at_exit(::testing::TempDir() + "hf_parts_" + std::to_string(::getpid()) +
                                 "_" + std::to_string(counter++) + ".json");
  std::ofstream(path) << j.dump(1);
  return path;
}

HfTokenizer load(const Json& j) {
  return HfTokenizer(write(j));
}

// The message loading j fails with ("" when it loads).
std::string refusal(const Json& j, std::string* path_out = nullptr) {
  std::string path = write(j);
  if (path_out) *path_out = path;
  try {
    HfTokenizer tok(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string decode(const HfTokenizer& tok, const Ids& ids) {
  std::string out;
  for (int id : ids) {
    if (!tok.is_special(id)) out += tok.token_bytes(id);
  }
  int strip = 0;
  while (strip < tok.strip_leading_spaces() && strip < static_cast<int>(out.size()) &&
         out[strip] == ' ') {
    ++strip;
  }
  return out.substr(strip);
}

Json split(const Json& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

TEST(HfTokenizerParts, MergesReadInStringAndPairForms) {
  std::vector<std::string> vocab = {"a", "b", "c", "ab", "abc"};
  // (Two-string lists must be spelled Json::array: nlohmann reads {{"a", "b"}} as an object.)
  Json pairs = Json::array({Json::array({"a", "b"}), Json::array({"ab", "c"})});
  for (const Json& merges : {Json{"a b", "ab c"}, pairs}) {
    HfTokenizer tok = load(tokenizer_json(bpe(vocab, merges)));
    EXPECT_EQ(tok.encode("abc"), (Ids{4}));
    EXPECT_EQ(tok.encode("cab"), (Ids{2, 3}));
    EXPECT_EQ(tok.encode("ba"), (Ids{1, 0}));
  }
}

TEST(HfTokenizerParts, LowerRankedMergeGoesFirst) {
  std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc"};
  EXPECT_EQ(load(tokenizer_json(bpe(vocab, {"b c", "a b"}))).encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(load(tokenizer_json(bpe(vocab, {"a b", "b c"}))).encode("abc"), (Ids{3, 2}));
}

TEST(HfTokenizerParts, TiedPairsMergeLeftmostFirstInShortAndLongWords) {
  HfTokenizer tok = load(tokenizer_json(bpe({"a", "aa", "aaaa"}, {"a a", "aa aa"})));
  EXPECT_EQ(tok.encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(tok.encode("aaaaaaaa"), (Ids{2, 2}));
  Ids sixteen_fours(16, 2);
  Ids odd = sixteen_fours, even = sixteen_fours;
  odd.push_back(0);
  even.push_back(1);
  EXPECT_EQ(tok.encode(std::string(65, 'a')), odd);  // long words take another merge loop
  EXPECT_EQ(tok.encode(std::string(66, 'a')), even);
}

TEST(HfTokenizerParts, ByteFallbackSpellsMissingCharactersAsByteTokens) {
  Json model = bpe({"<unk>", "a", "<0xC3>", "<0xA9>"}, Json::array(),
                   {{"byte_fallback", true}, {"unk_token", "<unk>"}});
  HfTokenizer tok = load(tokenizer_json(model, {{"decoder", {{"type", "ByteFallback"}}}}));
  EXPECT_EQ(tok.encode("a\xC3\xA9"), (Ids{1, 2, 3}));  // é is C3 A9
  EXPECT_EQ(tok.encode("\xC3\xBC"), (Ids{0}));         // ü needs <0xBC>, absent: unk
  EXPECT_TRUE(tok.is_byte(2));
  EXPECT_EQ(tok.token_bytes(2), "\xC3");
  EXPECT_FALSE(tok.is_byte(1));
  EXPECT_EQ(decode(tok, tok.encode("a\xC3\xA9")), "a\xC3\xA9");
}

TEST(HfTokenizerParts, UnknownCharactersBecomeUnkFusedOrNot) {
  std::vector<std::string> vocab = {"<unk>", "a"};
  Json unk = {{"unk_token", "<unk>"}};
  Json fused = {{"unk_token", "<unk>"}, {"fuse_unk", true}};
  EXPECT_EQ(load(tokenizer_json(bpe(vocab, Json::array(), fused))).encode("xya"), (Ids{0, 1}));
  EXPECT_EQ(load(tokenizer_json(bpe(vocab, Json::array(), fused))).encode("xaxy"), (Ids{0, 1, 0}));
  EXPECT_EQ(load(tokenizer_json(bpe(vocab, Json::array(), unk))).encode("xya"), (Ids{0, 0, 1}));
  EXPECT_EQ(load(tokenizer_json(bpe(vocab))).encode("xya"), (Ids{1}));  // no unk: dropped
}

TEST(HfTokenizerParts, IgnoreMergesTakesWholeWordsFromTheVocab) {
  std::vector<std::string> vocab = {"a", "b", "c", "bc", "abc"};
  HfTokenizer whole = load(tokenizer_json(bpe(vocab, {"b c"}, {{"ignore_merges", true}})));
  HfTokenizer merged = load(tokenizer_json(bpe(vocab, {"b c"})));
  EXPECT_EQ(whole.encode("abc"), (Ids{4}));
  EXPECT_EQ(merged.encode("abc"), (Ids{0, 3}));
  EXPECT_EQ(whole.encode("abcb"), (Ids{0, 3, 1}));  // not in the vocab: merged as usual
}

TEST(HfTokenizerParts, VocabGapsHaveNoToken) {
  Json model = bpe({"a"});
  model["vocab"] = {{"a", 0}, {"b", 2}};
  HfTokenizer tok = load(tokenizer_json(model));
  EXPECT_EQ(tok.vocab_size(), 3);
  EXPECT_FALSE(tok.has_token(1));
  EXPECT_EQ(tok.piece(1), "");
  EXPECT_EQ(tok.token_bytes(1), "");
  EXPECT_EQ(tok.piece(2), "b");
  EXPECT_EQ(tok.token_id("b"), 2);
  EXPECT_EQ(tok.token_id("c"), std::nullopt);
}

// Llama 2's tokenizer.json: SentencePiece BPE spelled with normalizers and decoders.
Json llama2_style() {
  Json model = bpe({"<unk>", "<s>", "</s>", "\u2581", "H", "i", "\u2581H", "\u2581Hi", "<0x0A>"},
                   {"\u2581 H", "\u2581H i"},
                   {{"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"}});
  Json normalizer = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  Json decoder = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  Json post = {{"type", "TemplateProcessing"},
               {"single",
                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"pair", Json::array()},
               {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  return tokenizer_json(model,
                        {{"normalizer", normalizer},
                         {"decoder", decoder},
                         {"post_processor", post},
                         {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}}});
}

TEST(HfTokenizerParts, Llama2StyleNormalizersEncodeEachStretchBetweenAddedTokens) {
  HfTokenizer tok = load(llama2_style());
  EXPECT_EQ(tok.encode("Hi Hi"), (Ids{7, 7}));        // "▁Hi▁Hi"
  EXPECT_EQ(tok.encode("Hi\n"), (Ids{7, 8}));         // newline: byte fallback
  EXPECT_EQ(tok.encode("Hi</s>Hi"), (Ids{7, 2, 7}));  // each stretch gets its own "▁"
  EXPECT_EQ(tok.prefix_ids(), (Ids{1}));
  EXPECT_TRUE(tok.suffix_ids().empty());
}

TEST(HfTokenizerParts, Llama2StyleDecoderGivesBackTheText) {
  HfTokenizer tok = load(llama2_style());
  EXPECT_EQ(tok.token_bytes(7), " Hi");
  EXPECT_EQ(tok.token_bytes(8), "\n");
  EXPECT_TRUE(tok.is_byte(8));
  EXPECT_EQ(tok.strip_leading_spaces(), 1);
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_EQ(decode(tok, tok.encode("Hi Hi\n")), "Hi Hi\n");
}

Json metaspace_tokenizer(const Json& pre_tokenizer) {
  Json model = bpe({"\u2581", "a", "b", "\u2581a", "\u2581b", "<s>"}, Json::array(),
                   {{"ignore_merges", true}});
  Json decoder = pre_tokenizer;
  decoder.erase("split");
  return tokenizer_json(model, {{"pre_tokenizer", pre_tokenizer},
                                {"decoder", decoder},
                                {"added_tokens", {added(5, "<s>")}}});
}

Json metaspace(const std::string& scheme, bool split_words = true) {
  return {{"type", "Metaspace"},
          {"replacement", "\u2581"},
          {"prepend_scheme", scheme},
          {"split", split_words}};
}

TEST(HfTokenizerParts, MetaspacePrependsByScheme) {
  HfTokenizer always = load(metaspace_tokenizer(metaspace("always")));
  EXPECT_EQ(always.encode("a b"), (Ids{3, 4}));
  EXPECT_EQ(always.encode("<s>a"), (Ids{5, 3}));
  HfTokenizer first = load(metaspace_tokenizer(metaspace("first")));
  EXPECT_EQ(first.encode("a b"), (Ids{3, 4}));
  EXPECT_EQ(first.encode("<s>a"), (Ids{5, 1}));  // not at the start of the input
  EXPECT_EQ(first.encode("a<s>a"), (Ids{3, 5, 1}));
  HfTokenizer never = load(metaspace_tokenizer(metaspace("never")));
  EXPECT_EQ(never.encode("a b"), (Ids{1, 4}));
  Json legacy = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}};
  EXPECT_EQ(load(metaspace_tokenizer(legacy)).encode("a b"), (Ids{1, 4}));
}

TEST(HfTokenizerParts, MetaspaceWithoutSplitKeepsOneWord) {
  HfTokenizer tok = load(metaspace_tokenizer(metaspace("always", false)));
  EXPECT_EQ(tok.encode("a b"), (Ids{0, 1, 0, 2}));  // "▁a▁b" is no token: its characters
}

TEST(HfTokenizerParts, MetaspaceDecoderTurnsReplacementIntoSpace) {
  HfTokenizer always = load(metaspace_tokenizer(metaspace("always")));
  EXPECT_EQ(always.token_bytes(3), " a");
  EXPECT_EQ(always.strip_leading_spaces(), 1);
  EXPECT_EQ(decode(always, always.encode("a b")), "a b");
  EXPECT_EQ(load(metaspace_tokenizer(metaspace("never"))).strip_leading_spaces(), 0);
}

TEST(HfTokenizerParts, NfcComposesBeforeTheModel) {
  Json model = bpe({"\u00E9", "e", "\u0301"});
  EXPECT_EQ(load(tokenizer_json(model, {{"normalizer", {{"type", "NFC"}}}})).encode("e\u0301"),
            (Ids{0}));
  EXPECT_EQ(load(tokenizer_json(model)).encode("e\u0301"), (Ids{1, 2}));
}

TEST(HfTokenizerParts, ReplaceNormalizerTakesARegex) {
  Json normalizer = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}};
  HfTokenizer tok = load(tokenizer_json(bpe({"a", "_", "b"}), {{"normalizer", normalizer}}));
  EXPECT_EQ(tok.encode("a   b"), (Ids{0, 1, 2}));
}

// "a-b--c" cut at "-" by each behavior; every piece is a whole token (ignore_merges).
class HfTokenizerSplit : public ::testing::Test {
 protected:
  Ids encode(const Json& pre_tokenizer) {
    Json model = bpe({"a", "b", "c", "-", "a-", "b-", "-b", "-c", "--"}, Json::array(),
                     {{"ignore_merges", true}});
    return load(tokenizer_json(model, {{"pre_tokenizer", pre_tokenizer}})).encode("a-b--c");
  }
  const Json dash_ = {{"String", "-"}};
};

TEST_F(HfTokenizerSplit, RemovedDropsTheDelimiters) {
  EXPECT_EQ(encode(split(dash_, "Removed")), (Ids{0, 1, 2}));
}
TEST_F(HfTokenizerSplit, IsolatedKeepsEachDelimiterAlone) {
  EXPECT_EQ(encode(split(dash_, "Isolated")), (Ids{0, 3, 1, 3, 3, 2}));
}
TEST_F(HfTokenizerSplit, MergedWithPreviousJoinsTheTextBefore) {
  EXPECT_EQ(encode(split(dash_, "MergedWithPrevious")), (Ids{4, 5, 3, 2}));  // a- b- - c
}
TEST_F(HfTokenizerSplit, MergedWithNextJoinsTheTextAfter) {
  EXPECT_EQ(encode(split(dash_, "MergedWithNext")), (Ids{0, 6, 3, 7}));  // a -b - -c
}
TEST_F(HfTokenizerSplit, ContiguousJoinsAdjacentDelimiters) {
  EXPECT_EQ(encode(split(dash_, "Contiguous")), (Ids{0, 3, 1, 8, 2}));  // a - b -- c
}
TEST_F(HfTokenizerSplit, InvertSwapsMatchesAndText) {
  EXPECT_EQ(encode(split(dash_, "Removed", true)), (Ids{3, 3, 3}));
  EXPECT_EQ(encode(split(dash_, "MergedWithPrevious", true)), (Ids{0, 6, 3, 7}));
}
TEST_F(HfTokenizerSplit, RegexPatternsMatchRuns) {
  EXPECT_EQ(encode(split({{"Regex", "-+"}}, "Isolated")), (Ids{0, 3, 1, 8, 2}));
}
TEST_F(HfTokenizerSplit, SequenceRunsStepsInOrder) {
  Json seq = {{"type", "Sequence"},
              {"pretokenizers", {split({{"String", "--"}}, "Removed"), split(dash_, "Isolated")}}};
  EXPECT_EQ(encode(seq), (Ids{0, 3, 1, 2}));  // a - b c
}

// Hugging Face compiles patterns with Oniguruma, whose \s is Unicode White_Space (U+0085 yes,
// U+180E no since Unicode 6.3), whose \w takes marks, and whose \h is a hex digit.
Ids split_encode(const std::vector<std::string>& vocab, const std::string& regex,
                 const std::string& text) {
  Json model = bpe(vocab, Json::array(), {{"ignore_merges", true}});
  Json pre = split({{"Regex", regex}}, "Isolated");
  return load(tokenizer_json(model, {{"pre_tokenizer", pre}})).encode(text);
}

TEST(HfTokenizerParts, RegexClassesReadAsOniguruma) {
  std::vector<std::string> vocab = {"a", "b", "\u0085", "a\u180Eb", "e\u0301", "!", "ab", " xy"};
  EXPECT_EQ(split_encode(vocab, "\\s+", "a\u0085b"), (Ids{0, 2, 1}));
  EXPECT_EQ(split_encode(vocab, "\\s+", "a\u180Eb"), (Ids{3}));
  EXPECT_EQ(split_encode(vocab, "[^\\s]+", "a\u180Eb"), (Ids{3}));
  EXPECT_EQ(split_encode(vocab, "\\w+", "e\u0301!"), (Ids{4, 5}));
  EXPECT_EQ(split_encode(vocab, "\\h+", "ab xy"), (Ids{6, 7}));
}

// GPT-2's ByteLevel: words split by its regex, spelled in the byte-level alphabet (' ' is 'Ġ').
Json byte_level_tokenizer(bool add_prefix_space) {
  Json model = bpe({"\u0120hi", "\u0120there", "hi", "\u0120", "\u0120\u00C3\u00A9", "<x>"},
                   Json::array(), {{"ignore_merges", true}});
  Json pre = {{"type", "ByteLevel"},
              {"add_prefix_space", add_prefix_space},
              {"trim_offsets", true},
              {"use_regex", true}};
  return tokenizer_json(model, {{"pre_tokenizer", pre},
                                {"decoder", {{"type", "ByteLevel"}}},
                                {"added_tokens", {added(5, "<x>")}}});
}

TEST(HfTokenizerParts, ByteLevelSplitsLikeGpt2AndMapsBytes) {
  HfTokenizer prefixed = load(byte_level_tokenizer(true));
  EXPECT_EQ(prefixed.encode("hi there"), (Ids{0, 1}));
  EXPECT_EQ(prefixed.encode("hi  there"), (Ids{0, 3, 1}));  // " hi" " " " there"
  EXPECT_EQ(prefixed.encode("\xC3\xA9"), (Ids{4}));         // " é" is bytes 20 C3 A9: "ĠÃ©"
  EXPECT_EQ(prefixed.encode("hi<x>hi"), (Ids{0, 5, 0}));    // each stretch gets the prefix
  EXPECT_EQ(load(byte_level_tokenizer(false)).encode("hi there"), (Ids{2, 1}));
}

TEST(HfTokenizerParts, ByteLevelDecoderMapsCharactersBackToBytes) {
  Json model = bpe({"\u0120hi", "\u010A", "\u2605", "\u00C3\u00A9"});
  HfTokenizer tok = load(tokenizer_json(
      model, {{"decoder", {{"type", "ByteLevel"}}}, {"added_tokens", {added(4, "<a b>")}}}));
  EXPECT_EQ(tok.token_bytes(0), " hi");
  EXPECT_EQ(tok.token_bytes(1), "\n");
  EXPECT_EQ(tok.token_bytes(2), "\u2605");  // outside the alphabet: kept as spelled
  EXPECT_EQ(tok.token_bytes(3), "\xC3\xA9");
  EXPECT_EQ(tok.token_bytes(4), "<a b>");  // ' ' is outside the alphabet too
}

TEST(HfTokenizerParts, AddedTokensMatchLeftmostLongest) {
  Json model = bpe({"a", "b", "c", "d", "x"});
  HfTokenizer tok = load(tokenizer_json(
      model, {{"added_tokens", {added(5, "abc"), added(6, "bcd"), added(7, "ab")}}}));
  EXPECT_EQ(tok.encode("abcd"), (Ids{5, 3}));
  EXPECT_EQ(tok.encode("xbcd"), (Ids{4, 6}));
  EXPECT_EQ(tok.encode("abx"), (Ids{7, 4}));
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.token_id("bcd"), 6);
}

TEST(HfTokenizerParts, AddedTokensStripWhitespaceAndKeepToSingleWords) {
  Json model = bpe({"a", "b", " ", "c", "t"});
  HfTokenizer tok = load(tokenizer_json(
      model, {{"added_tokens",
               {added(5, "<m>", {{"lstrip", true}}), added(6, "<n>", {{"rstrip", true}}),
                added(7, "cat", {{"single_word", true}})}}}));
  EXPECT_EQ(tok.encode("a  <m>b"), (Ids{0, 5, 1}));
  EXPECT_EQ(tok.encode("a  <n>b"), (Ids{0, 2, 2, 6, 1}));
  EXPECT_EQ(tok.encode("a<n>  b"), (Ids{0, 6, 1}));
  EXPECT_EQ(tok.encode("a cat"), (Ids{0, 2, 7}));
  EXPECT_EQ(tok.encode("acat"), (Ids{0, 3, 0, 4}));  // a word character touches it
  EXPECT_EQ(tok.encode("cat_"), (Ids{3, 0, 4}));     // '_' is a word character (and no token)
}

TEST(HfTokenizerParts, AddedTokensCutTheTextBeforeMerges) {
  Json model = bpe({"<", "m", ">", "<m", "<m>"}, {"< m", "<m >"});
  EXPECT_EQ(load(tokenizer_json(model)).encode("<m<m>"), (Ids{3, 4}));
  HfTokenizer tok = load(tokenizer_json(model, {{"added_tokens", {added(5, "<m>")}}}));
  EXPECT_EQ(tok.encode("<m<m>"), (Ids{3, 5}));
  EXPECT_EQ(tok.token_id("<m>"), 5);  // the added token before the vocab's spelling
}

TEST(HfTokenizerParts, NormalizedAddedTokensMatchNormalizedText) {
  Json model = bpe({"a", "b", "_", "-"});
  Json normalizer = {{"type", "Replace"}, {"pattern", {{"String", "-"}}}, {"content", "_"}};
  HfTokenizer normalized = load(tokenizer_json(
      model, {{"normalizer", normalizer},
              {"added_tokens", {added(4, "a_b", {{"normalized", true}, {"special", false}})}}}));
  EXPECT_EQ(normalized.encode("a-b"), (Ids{4}));
  HfTokenizer raw = load(
      tokenizer_json(model, {{"normalizer", normalizer}, {"added_tokens", {added(4, "a_b")}}}));
  EXPECT_EQ(raw.encode("a-b"), (Ids{0, 2, 1}));
  EXPECT_EQ(raw.encode("a_b"), (Ids{4}));
}

TEST(HfTokenizerParts, TemplateGivesPrefixAndSuffixThroughASequence) {
  Json post = {{"type", "Sequence"},
               {"processors",
                {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
                 {{"type", "TemplateProcessing"},
                  {"single",
                   {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                    {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                  {"special_tokens",
                   {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                    {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}}}}};
  HfTokenizer tok = load(tokenizer_json(bpe({"a", "<s>", "</s>"}), {{"post_processor", post}}));
  EXPECT_EQ(tok.prefix_ids(), (Ids{1}));
  EXPECT_EQ(tok.suffix_ids(), (Ids{2}));
  EXPECT_EQ(tok.encode("a"), (Ids{0}));  // encode adds neither
}

TEST(HfTokenizerParts, ReplaceAndFuseStripDecoders) {
  Json decoder = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"Regex", "_+"}}}, {"content", " "}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 0}}}}};
  HfTokenizer tok = load(tokenizer_json(bpe({"__a", "b_"}), {{"decoder", decoder}}));
  EXPECT_EQ(tok.token_bytes(0), " a");
  EXPECT_EQ(tok.token_bytes(1), "b ");
  EXPECT_EQ(tok.strip_leading_spaces(), 2);
}

struct RefusalCase {
  const char* name;
  Json parts;        // merged into a working tokenizer.json
  std::string says;  // follows "<path>: "
};

TEST(HfTokenizerParts, UnsupportedComponentsAreRefusedByName) {
  const Json whitespace = {{"type", "Whitespace"}};
  const std::vector<RefusalCase> cases = {
      {"WordPiece model",
       {{"model", {{"type", "WordPiece"}, {"vocab", Json::object()}}}},
       "model type 'WordPiece' is not supported (supported: BPE)"},
      {"Digits",
       {{"pre_tokenizer", {{"type", "Digits"}, {"individual_digits", true}}}},
       "pre_tokenizer type 'Digits' is not supported (supported: Split, ByteLevel, Sequence, "
       "Metaspace)"},
      {"nested Whitespace",
       {{"pre_tokenizer",
         {{"type", "Sequence"}, {"pretokenizers", {metaspace("always"), whitespace}}}}},
       "pre_tokenizer.pretokenizers[1] type 'Whitespace' is not supported"},
      {"NFKC",
       {{"normalizer", {{"type", "NFKC"}}}},
       "normalizer type 'NFKC' is not supported (supported: Prepend, Replace, NFC, Sequence)"},
      {"nested Lowercase",
       {{"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}}}},
       "normalizer.normalizers[0] type 'Lowercase' is not supported"},
      {"WordPiece decoder",
       {{"decoder", {{"type", "WordPiece"}, {"prefix", "##"}}}},
       "decoder type 'WordPiece' is not supported"},
      {"RobertaProcessing",
       {{"post_processor", {{"type", "RobertaProcessing"}}}},
       "post_processor type 'RobertaProcessing' is not supported"},
      {"Strip before Fuse",
       {{"decoder", {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}},
       "decoder: Strip before any Fuse is not supported"},
      {"after ByteLevel",
       {{"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers", {{{"type", "ByteLevel"}}, metaspace("always")}}}}},
       "pre_tokenizer.pretokenizers[1]: a pre-tokenizer after ByteLevel is not supported"},
      {"bad regex",
       {{"pre_tokenizer", split({{"Regex", "(a"}}, "Isolated")}},
       "pre_tokenizer: regex '(a' does not compile"},
  };
  for (const RefusalCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path;
    std::string message = refusal(tokenizer_json(bpe({"a"}), c.parts), &path);
    EXPECT_NE(message.find(path + ": " + c.says), std::string::npos) << message;
  }
}

TEST(HfTokenizerParts, UnsupportedBpeOptionsAreRefusedByName) {
  const std::vector<std::pair<Json, std::string>> cases = {
      {{{"dropout", 0.1}}, "model: BPE dropout 0.1 is not supported"},
      {{{"continuing_subword_prefix", "##"}}, "model: BPE continuing_subword_prefix '##'"},
      {{{"end_of_word_suffix", "</w>"}}, "model: BPE end_of_word_suffix '</w>'"},
      {{{"unk_token", "<unk>"}}, "model: unk_token '<unk>' is not in the vocab"},
      {{{"merges", {"a q"}}}, "model: merges[0] needs 'q', which is not in the vocab"},
  };
  for (const auto& [options, says] : cases) {
    SCOPED_TRACE(says);
    std::string path;
    std::string message = refusal(tokenizer_json(bpe({"a"}, Json::array(), options)), &path);
    EXPECT_NE(message.find(path + ": " + says), std::string::npos) << message;
  }
}

TEST(HfTokenizerParts, UnreadableFilesAreRefusedWithTheirPath) {
  std::string missing = ::testing::TempDir() + "no_such_tokenizer.json";
  EXPECT_THROW(
      {
        try {
          HfTokenizer tok(missing);
        } catch (const Error& e) {
          EXPECT_EQ(std::string(e.what()),
                    "cannot read tokenizer file " + missing + ": No such file or directory");
          throw;
        }
      },
      Error);
  std::string broken = ::testing::TempDir() + "broken_tokenizer.json";
  std::ofstream(broken) << "{\"model\": ";
  try {
    HfTokenizer tok(broken);
    ADD_FAILURE() << "loaded a truncated file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(broken + ": not valid JSON"), std::string::npos);
  }
}

// Tokenizer::min_tokens over tokenizer.json: bytes over the longest token's text times how many
// times shorter the normalizer may make text; none when text may vanish.
TEST(HfTokenizerParts, MinTokensFollowsTheNormalizerAndWhatDropsText) {
  const Json unk = {{"unk_token", "<unk>"}};
  const std::vector<std::string> vocab = {"<unk>", "a", "b", "-", "abcdefgh"};
  const std::string text(64, '-');
  const auto least = [&](const Json& parts, const Json& options) {
    return Tokenizer(write(tokenizer_json(bpe(vocab, Json::array(), options), parts)))
        .min_tokens(text);
  };
  const auto replace = [](const Json& pattern, const std::string& content) {
    return Json{{"normalizer", {{"type", "Replace"}, {"pattern", pattern}, {"content", content}}}};
  };
  using Count = std::optional<size_t>;
  EXPECT_EQ(least(Json::object(), unk), Count(8)) << "64 bytes over the longest token, 'abcdefgh'";
  EXPECT_EQ(least(replace({{"String", "--"}}, "-"), unk), Count(4)) << "'--' to '-' may halve text";
  EXPECT_EQ(least(replace({{"String", "-"}}, "--"), unk), Count(8)) << "growing text costs nothing";
  EXPECT_EQ(least({{"normalizer", {{"type", "NFC"}}}}, unk), Count(2));
  EXPECT_EQ(least(replace({{"String", "-"}}, ""), unk), std::nullopt) << "text removed";
  EXPECT_EQ(least(replace({{"Regex", "-+"}}, "-"), unk), std::nullopt)
      << "a run of any length made one";
  EXPECT_EQ(least({{"pre_tokenizer", split({{"String", "-"}}, "Removed")}}, unk), std::nullopt);
  EXPECT_EQ(least({{"added_tokens", {added(5, "<x>", {{"rstrip", true}})}}}, unk), std::nullopt)
      << "the token takes the whitespace after it";
  EXPECT_EQ(least(Json::object(), {{"unk_token", "<unk>"}, {"fuse_unk", true}}), std::nullopt)
      << "a run of unknown characters is one token";
  EXPECT_EQ(least(Json::object(), Json::object()), std::nullopt)
      << "no unk token: unknown characters vanish";
  // The bound holds for the densest text: the longest token over and over, and unknown characters.
  const Tokenizer plain(write(tokenizer_json(bpe(vocab, Json::array(), unk))));
  for (const std::string& t :
       {std::string(64, 'a'), std::string("abcdefgh") + "abcdefgh", std::string(40, '?')})
    EXPECT_LE(*plain.min_tokens(t), plain.encode(t).size()) << t;
}

}  // namespace
}  // namespace tpllama
