// PromptReader: text and JSONL parsing, per-line error records, default resolution, the
// per-request seed derivation, and the progress line count.
#include "io/prompt_reader.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

#include "core/error.h"

namespace tpllama {
namespace {

using nlohmann::json;

std::vector<Request> read_all(const std::string& content, InputFormat format,
                              RequestDefaults defaults = {}) {
  std::istringstream in(content);
  PromptReader reader(in, format, defaults, "test.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

std::vector<Request> read_jsonl(const std::string& content, RequestDefaults defaults = {}) {
  return read_all(content, InputFormat::kJsonl, defaults);
}

// The single request produced by a one-line JSONL input.
Request one(const std::string& line, RequestDefaults defaults = {}) {
  auto all = read_jsonl(line + "\n", defaults);
  EXPECT_EQ(all.size(), 1u);
  return all.empty() ? Request{} : all[0];
}

TEST(DetectInputFormat, JsonExtensionsAreJsonlAnythingElseIsText) {
  EXPECT_EQ(detect_input_format("a/b/prompts.jsonl"), InputFormat::kJsonl);
  EXPECT_EQ(detect_input_format("prompts.json"), InputFormat::kJsonl);
  EXPECT_EQ(detect_input_format("prompts.ndjson"), InputFormat::kJsonl);
  EXPECT_EQ(detect_input_format("PROMPTS.JSONL"), InputFormat::kJsonl);
  EXPECT_EQ(detect_input_format("prompts.txt"), InputFormat::kText);
  EXPECT_EQ(detect_input_format("prompts"), InputFormat::kText);
  EXPECT_EQ(detect_input_format("jsonl"), InputFormat::kText);
}

TEST(PromptReaderText, SkipsBlankLinesStripsCrAndNumbersByFileLine) {
  auto reqs = read_all("first\r\n\r\n  \t \nsecond line\r\nthird", InputFormat::kText);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].prompt, "first");
  EXPECT_EQ(reqs[0].line, 1u);
  EXPECT_EQ(reqs[0].id, json(1));
  EXPECT_TRUE(reqs[0].id.is_number_integer());
  EXPECT_EQ(reqs[1].prompt, "second line");
  EXPECT_EQ(reqs[1].line, 4u);
  EXPECT_EQ(reqs[1].id, json(4));
  EXPECT_EQ(reqs[2].prompt, "third");  // no trailing newline
  EXPECT_EQ(reqs[2].line, 5u);
  for (const auto& r : reqs) EXPECT_TRUE(r.error.empty()) << r.error;
}

TEST(PromptReaderText, KeepsInnerWhitespaceAndJsonLookingText) {
  auto reqs = read_all("  indented {\"prompt\": 1}  \n", InputFormat::kText);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].prompt, "  indented {\"prompt\": 1}  ");
  EXPECT_TRUE(reqs[0].error.empty());
}

TEST(PromptReaderText, AppliesDefaults) {
  RequestDefaults d;
  d.max_tokens = 17;
  d.sampling.temperature = 0.7;
  d.sampling.top_k = 40;
  d.sampling.top_p = 0.9;
  d.sampling.min_p = 0.05;
  auto reqs = read_all("hello\n", InputFormat::kText, d);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].max_tokens, 17);
  EXPECT_DOUBLE_EQ(reqs[0].sampling.temperature, 0.7);
  EXPECT_EQ(reqs[0].sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(reqs[0].sampling.top_p, 0.9);
  EXPECT_DOUBLE_EQ(reqs[0].sampling.min_p, 0.05);
  EXPECT_TRUE(reqs[0].stop.empty());
}

TEST(PromptReaderText, StripsUtf8ByteOrderMarkOnFirstLine) {
  auto reqs = read_all("\xEF\xBB\xBFhello\n", InputFormat::kText);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].prompt, "hello");
}

TEST(PromptReaderText, HandlesMultiMegabyteLines) {
  std::string big(3 * 1024 * 1024, 'x');
  auto reqs = read_all("a\n" + big + "\nb\n", InputFormat::kText);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].prompt.size(), big.size());
  EXPECT_EQ(reqs[2].prompt, "b");
}

TEST(PromptReaderText, EmptyInputYieldsNothing) {
  EXPECT_TRUE(read_all("", InputFormat::kText).empty());
  EXPECT_TRUE(read_all("\n\n \r\n", InputFormat::kText).empty());
}

TEST(PromptReader, LinesReadCountsBlankLinesAndAdvancesOneRequestAtATime) {
  std::istringstream in("a\n\n\nb\n\n");
  PromptReader reader(in, InputFormat::kText, {}, "mem");
  EXPECT_EQ(reader.lines_read(), 0u);
  ASSERT_TRUE(reader.next(true).has_value());
  EXPECT_EQ(reader.lines_read(), 1u);
  ASSERT_TRUE(reader.next(true).has_value());
  EXPECT_EQ(reader.lines_read(), 4u);
  EXPECT_FALSE(reader.next(true).has_value());
  EXPECT_EQ(reader.lines_read(), 5u);
  EXPECT_FALSE(reader.next(true).has_value());
}

TEST(PromptReaderJsonl, StringNumericAndDefaultIds) {
  auto reqs = read_jsonl(
      "{\"id\": \"req-a\", \"prompt\": \"p1\"}\n"
      "\n"
      "{\"id\": 42, \"prompt\": \"p2\"}\r\n"
      "{\"prompt\": \"p3\"}\n"
      "{\"id\": -5, \"prompt\": \"p4\"}\n"
      "{\"id\": null, \"prompt\": \"p5\"}\n");
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0].id, json("req-a"));
  EXPECT_EQ(reqs[0].prompt, "p1");
  EXPECT_EQ(reqs[0].line, 1u);
  EXPECT_EQ(reqs[1].id, json(42));
  EXPECT_EQ(reqs[1].line, 3u);
  EXPECT_EQ(reqs[2].id, json(4));
  EXPECT_TRUE(reqs[2].id.is_number());
  EXPECT_EQ(reqs[3].id, json(-5));
  EXPECT_EQ(reqs[4].id, json(6));
  for (const auto& r : reqs) EXPECT_TRUE(r.error.empty()) << r.error;
}

TEST(PromptReaderJsonl, PromptIsTakenVerbatimIncludingEscapes) {
  Request r = one(R"({"prompt": "line1\nline2 \u00e9 \"q\""})");
  EXPECT_EQ(r.prompt, "line1\nline2 \xC3\xA9 \"q\"");
}

struct MalformedCase {
  std::string line;
  std::string expected_error;  // exact message for line 2
};

TEST(PromptReaderJsonl, MalformedLinesBecomeErrorRecordsAndLaterLinesStillArrive) {
  const std::vector<MalformedCase> cases = {
      {R"({"prompt": "x", "max_tokens": "ten"})",
       R"(line 2: field 'max_tokens' must be an integer >= 1, got "ten")"},
      {R"({"prompt": "x", "max_tokens": 0})",
       "line 2: field 'max_tokens' must be an integer >= 1, got 0"},
      {R"({"prompt": "x", "max_tokens": 2.5})",
       "line 2: field 'max_tokens' must be an integer >= 1, got 2.5"},
      {R"({"prompt": "x", "max_tokens": 99999999999})",
       "line 2: field 'max_tokens' must be at most 2147483647, got 99999999999"},
      {"[1, 2]", "line 2: expected a JSON object, got array"},
      {R"("just a string")", "line 2: expected a JSON object, got string"},
      {R"({"id": "a"})", "line 2: missing required field 'prompt'"},
      {R"({"prompt": 5})", "line 2: field 'prompt' must be a string or a list of token ids, got 5"},
      {R"({"prompt": [1, 2.5]})",
       "line 2: field 'prompt' must be a string or a list of token ids (integers >= 0); element 1 "
       "is 2.5"},
      {R"({"prompt": []})", "line 2: field 'prompt' is an empty list: no token to start from"},
      {R"({"id": [1], "prompt": "x"})",
       "line 2: field 'id' must be a string or an integer, got [1]"},
      {R"({"id": 1.5, "prompt": "x"})",
       "line 2: field 'id' must be a string or an integer, got 1.5"},
      {R"({"prompt": "x", "temperature": -0.1})",
       "line 2: field 'temperature' must be a number >= 0, got -0.1"},
      {R"({"prompt": "x", "temperature": "hot"})",
       R"(line 2: field 'temperature' must be a number >= 0, got "hot")"},
      {R"({"prompt": "x", "top_k": 4.5})", "line 2: field 'top_k' must be an integer, got 4.5"},
      {R"({"prompt": "x", "top_p": 0})", "line 2: field 'top_p' must be a number in (0, 1], got 0"},
      {R"({"prompt": "x", "top_p": 1.5})",
       "line 2: field 'top_p' must be a number in (0, 1], got 1.5"},
      {R"({"prompt": "x", "min_p": -1})",
       "line 2: field 'min_p' must be a number in [0, 1], got -1"},
      {R"({"prompt": "x", "seed": -3})",
       "line 2: field 'seed' must be an integer between 0 and 2^64-1, got -3"},
      {R"({"prompt": "x", "stop": 7})",
       "line 2: field 'stop' must be a string or a list of strings, got 7"},
      {R"({"prompt": "x", "stop": ["a", 1]})",
       R"(line 2: field 'stop' must be a string or a list of strings, got ["a",1])"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    auto reqs = read_jsonl("{\"prompt\": \"before\"}\n" + c.line + "\n\n{\"prompt\": \"after\"}\n");
    ASSERT_EQ(reqs.size(), 3u);
    EXPECT_TRUE(reqs[0].error.empty());
    EXPECT_EQ(reqs[1].error, c.expected_error);
    EXPECT_EQ(reqs[1].line, 2u);
    EXPECT_TRUE(reqs[2].error.empty()) << reqs[2].error;
    EXPECT_EQ(reqs[2].prompt, "after");
    EXPECT_EQ(reqs[2].line, 4u);
  }
}

TEST(PromptReaderJsonl, InvalidJsonNamesTheLineAndParserReason) {
  auto reqs =
      read_jsonl("{\"prompt\": \"ok\"}\n\n{\"prompt\": \"unterminated\n{\"prompt\": \"ok2\"}\n");
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].error.rfind("line 3: not valid JSON: ", 0), 0u) << reqs[1].error;
  EXPECT_GT(reqs[1].error.size(), std::string("line 3: not valid JSON: ").size());
  EXPECT_TRUE(reqs[1].id.is_null()) << "no id can be read from it";
  EXPECT_TRUE(reqs[1].line_failed);
  EXPECT_EQ(reqs[2].prompt, "ok2");
  EXPECT_TRUE(reqs[2].error.empty());
}

TEST(PromptReaderJsonl, InvalidUtf8InsideJsonIsAnErrorRecordNotAnException) {
  auto reqs = read_jsonl("{\"prompt\": \"caf\xE9\"}\n{\"prompt\": \"fine\"}\n");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].error.rfind("line 1: not valid JSON: ", 0), 0u) << reqs[0].error;
  EXPECT_TRUE(reqs[1].error.empty());
}

// An error line keeps the id it gives, or its line number when it gives none (as a valid line
// would); an id that cannot be read leaves the record without one, so it collides with no line's.
TEST(PromptReaderJsonl, ErrorRecordKeepsAReadableIdOtherwiseNone) {
  auto reqs = read_jsonl(
      "{\"id\": \"keep-me\", \"prompt\": \"x\", \"max_tokens\": -1}\n"
      "{\"id\": {\"a\": 1}, \"prompt\": \"x\"}\n"
      "not json\n"
      "{\"prompt\": 1}\n");
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].id, json("keep-me"));
  EXPECT_FALSE(reqs[0].error.empty());
  EXPECT_TRUE(reqs[1].id.is_null()) << reqs[1].id.dump();
  EXPECT_EQ(reqs[1].error, "line 2: field 'id' must be a string or an integer, got {\"a\":1}");
  EXPECT_TRUE(reqs[2].id.is_null()) << reqs[2].id.dump();
  EXPECT_FALSE(reqs[2].error.empty());
  EXPECT_EQ(reqs[3].id, json(4));
  EXPECT_FALSE(reqs[3].error.empty());
}

TEST(PromptReaderJsonl, HugeOffendingValuesAreClippedInTheMessage) {
  std::string big(100000, 'z');
  Request r = one("{\"prompt\": \"x\", \"max_tokens\": \"" + big + "\"}");
  EXPECT_EQ(r.error.rfind("line 1: field 'max_tokens' must be an integer >= 1, got \"zzz", 0), 0u);
  EXPECT_LT(r.error.size(), 300u);
}

// A line nesting past the limit is refused unread: its values are walked recursively later on.
// The 256th '[' opens level 257: the object is level 1, so the error is at the 256th bracket,
// byte 24 + 255.
TEST(PromptReaderJsonl, DeeplyNestedValueDoesNotCrashTheMessage) {
  std::string nested = std::string(100000, '[') + std::string(100000, ']');
  Request r = one("{\"prompt\": \"x\", \"stop\": " + nested + "}");
  EXPECT_EQ(r.error, "line 1: not read: JSON nested deeper than 256 levels (at byte 279)");
}

TEST(PromptReaderJsonl, RequestFieldsOverrideDefaults) {
  RequestDefaults d;
  d.max_tokens = 100;
  d.sampling.temperature = 0.0;
  d.sampling.top_k = 0;
  d.sampling.top_p = 1.0;
  d.sampling.min_p = 0.0;
  Request r =
      one(R"({"prompt": "p", "max_tokens": 12, "temperature": 0.8, "top_k": 50, "top_p": 0.95,)"
          R"( "min_p": 0.1, "seed": 1234})",
          d);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.8);
  EXPECT_EQ(r.sampling.top_k, 50);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.95);
  EXPECT_DOUBLE_EQ(r.sampling.min_p, 0.1);
  EXPECT_EQ(r.sampling.seed, 1234u);
}

TEST(PromptReaderJsonl, UnsetFieldsKeepDefaultsAndNullMeansUnset) {
  RequestDefaults d;
  d.max_tokens = 33;
  d.sampling.temperature = 1.3;
  d.sampling.top_k = 7;
  d.sampling.top_p = 0.5;
  d.sampling.min_p = 0.2;
  Request r = one(R"({"prompt": "p", "temperature": 0, "max_tokens": null})", d);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.max_tokens, 33);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.top_k, 7);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.min_p, 0.2);
}

TEST(PromptReaderJsonl, BoundaryValuesAreAccepted) {
  Request r = one(
      R"({"prompt": "p", "max_tokens": 1, "top_p": 1, "min_p": 1, "top_k": -5, "temperature": 2})");
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.max_tokens, 1);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 1.0);
  EXPECT_DOUBLE_EQ(r.sampling.min_p, 1.0);
  EXPECT_LE(r.sampling.top_k, 0);  // <= 0 means off
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 2.0);

  Request big = one(R"({"prompt": "p", "seed": 18446744073709551615, "top_k": 99999999999})");
  EXPECT_TRUE(big.error.empty()) << big.error;
  EXPECT_EQ(big.sampling.seed, 18446744073709551615ULL);
  EXPECT_GT(big.sampling.top_k, 1000000);
}

TEST(PromptReaderJsonl, StopAcceptsStringOrListAndDropsEmptyStrings) {
  Request single = one(R"({"prompt": "p", "stop": "###"})");
  EXPECT_EQ(single.stop, std::vector<std::string>{"###"});
  Request list = one(R"({"prompt": "p", "stop": ["\n\n", "", "END"]})");
  EXPECT_EQ(list.stop, (std::vector<std::string>{"\n\n", "END"}));
  Request empty_string = one(R"({"prompt": "p", "stop": ""})");
  EXPECT_TRUE(empty_string.stop.empty());
  Request empty_list = one(R"({"prompt": "p", "stop": []})");
  EXPECT_TRUE(empty_list.stop.empty());
  for (const auto* r : {&single, &list, &empty_string, &empty_list}) EXPECT_TRUE(r->error.empty());
}

// vLLM / OpenAI sampling fields: those tpllama lacks are taken at their neutral value without a
// warning, and any other value makes the line an error record naming the field (it would change the
// text); the penalties and logit_bias are read, and a value of the wrong type or range is refused.
TEST(PromptReaderJsonl, UnsupportedSamplingFieldsAreRefusedUnlessNeutral) {
  testing::internal::CaptureStderr();
  auto reqs = read_jsonl(
      "{\"prompt\": \"a\", \"presence_penalty\": 0, \"frequency_penalty\": 0.0, "
      "\"repetition_penalty\": 1, "
      "\"logit_bias\": {}, \"best_of\": 1, \"n\": 1, \"echo\": false}\n"
      "{\"prompt\": \"b\", \"presence_penalty\": 0.5}\n"
      "{\"prompt\": \"c\", \"repetition_penalty\": 1.1}\n"
      "{\"prompt\": \"d\", \"logit_bias\": {\"5\": 10}}\n"
      "{\"prompt\": \"e\", \"best_of\": 2}\n"
      "{\"prompt\": \"f\", \"frequency_penalty\": \"0\"}\n"
      "{\"prompt\": \"g\", \"n\": 2}\n"
      "{\"prompt\": \"h\", \"echo\": true}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"i\"}], \"echo\": true}\n");
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(reqs.size(), 9u);
  EXPECT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  EXPECT_EQ(err.find("ignoring"), std::string::npos) << err;
  EXPECT_TRUE(reqs[1].error.empty()) << reqs[1].error;
  EXPECT_DOUBLE_EQ(reqs[1].logit_rules.presence_penalty, 0.5);
  EXPECT_TRUE(reqs[2].error.empty()) << reqs[2].error;
  EXPECT_DOUBLE_EQ(reqs[2].logit_rules.repetition_penalty, 1.1);
  EXPECT_TRUE(reqs[3].error.empty()) << reqs[3].error;
  EXPECT_EQ(reqs[3].logit_rules.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, 10.0f}}));
  EXPECT_EQ(reqs[4].error,
            "line 5: field 'best_of' is 2: tpllama does not support it (only 1, which has no "
            "effect); ask for samples with 'n' (vLLM's V1 engine dropped best_of for it too)");
  EXPECT_EQ(reqs[5].error,
            "line 6: field 'frequency_penalty' must be a number in [-2, 2], got \"0\"");
  EXPECT_TRUE(reqs[6].error.empty()) << reqs[6].error;
  EXPECT_EQ(reqs[6].n, 2);
  EXPECT_EQ(reqs[0].n, 1);
  EXPECT_TRUE(reqs[7].error.empty()) << reqs[7].error;
  EXPECT_TRUE(reqs[7].echo);
  EXPECT_EQ(reqs[8].error,
            "line 9: field 'echo' is true: tpllama does not support it (only false, which has no "
            "effect)");
}

// splitmix64 reference outputs for seed 0 (the published sequence: e220a8397b1dcdaf,
// 6e789e6aa1b965f4, 06c45d188009454f, f88bb8a8724c81ec); with base seed 0, line n mixes n * gamma,
// which is the state after n steps, so line n gets output n + 1.
TEST(PromptReaderSeed, DerivedFromBaseSeedAndLineWithSplitmix64) {
  auto reqs = read_all("a\nb\nc\n", InputFormat::kText);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].sampling.seed, 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(reqs[1].sampling.seed, 0x06C45D188009454FULL);
  EXPECT_EQ(reqs[2].sampling.seed, 0xF88BB8A8724C81ECULL);
}

TEST(PromptReaderSeed, DiffersPerLineIsStableAcrossReadsAndDependsOnBaseSeed) {
  RequestDefaults d;
  d.seed = 42;
  const std::string input = "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n\n{\"prompt\": \"c\"}\n";
  auto first = read_jsonl(input, d);
  auto second = read_jsonl(input, d);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_EQ(first[i].sampling.seed, second[i].sampling.seed);
  EXPECT_NE(first[0].sampling.seed, first[1].sampling.seed);
  EXPECT_NE(first[1].sampling.seed, first[2].sampling.seed);
  EXPECT_NE(first[0].sampling.seed, first[2].sampling.seed);

  d.seed = 43;
  auto other_base = read_jsonl(input, d);
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_NE(first[i].sampling.seed, other_base[i].sampling.seed);
}

TEST(PromptReaderSeed, DependsOnLineNumberNotOnPositionAmongRequests) {
  // The same prompt on the same line gets the same seed whatever precedes it.
  auto with_blank = read_all("\nx\n", InputFormat::kText);
  auto with_prompt = read_all("y\nx\n", InputFormat::kText);
  ASSERT_EQ(with_blank.size(), 1u);
  ASSERT_EQ(with_prompt.size(), 2u);
  EXPECT_EQ(with_blank[0].sampling.seed, with_prompt[1].sampling.seed);
}

TEST(PromptReaderSeed, ExplicitSeedIsUsedAsIs) {
  RequestDefaults d;
  d.seed = 42;
  auto reqs = read_jsonl("{\"prompt\": \"a\", \"seed\": 7}\n{\"prompt\": \"b\", \"seed\": 7}\n", d);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].sampling.seed, 7u);
  EXPECT_EQ(reqs[1].sampling.seed, 7u);
}

TEST(PromptReaderFile, ReadsFileAndPicksFormatFromExtension) {
  auto dir = std::filesystem::path(testing::TempDir());
  auto jsonl = dir / "prompt_reader_test_input.jsonl";
  auto text = dir / "prompt_reader_test_input.txt";
  {
    std::ofstream(jsonl) << "{\"id\": \"q\", \"prompt\": \"from jsonl\"}\n";
    std::ofstream(text) << "{\"id\": \"q\", \"prompt\": \"from jsonl\"}\n";
  }
  PromptReader jr(jsonl.string(), {});
  auto a = jr.next(true);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->prompt, "from jsonl");
  EXPECT_EQ(a->id, json("q"));
  EXPECT_FALSE(jr.next(true).has_value());

  PromptReader tr(text.string(), {});
  auto b = tr.next(true);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->prompt, "{\"id\": \"q\", \"prompt\": \"from jsonl\"}");
  EXPECT_EQ(b->id, json(1));
  std::filesystem::remove(jsonl);
  std::filesystem::remove(text);
}

TEST(PromptReaderFile, MissingFileThrowsErrorNamingPathAndReason) {
  auto path = (std::filesystem::path(testing::TempDir()) / "no_such_prompts_file.txt").string();
  try {
    PromptReader reader(path, {});
    FAIL() << "expected tpllama::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot open prompt file " + path + ": No such file or directory");
  }
}

TEST(PromptReaderFile, DirectoryThrowsError) {
  std::string dir = testing::TempDir();
  try {
    PromptReader reader(dir, {});
    FAIL() << "expected tpllama::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open prompt file " + dir + ": Is a directory");
  }
}

TEST(PromptReaderJsonl, LogprobsTakesAnIntegerUpTo20OrABoolean) {
  EXPECT_EQ(one(R"({"prompt": "p"})").logprobs, -1);
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": null})").logprobs, -1);
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": false})").logprobs, -1);
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": true})").logprobs, 0);
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": 0})").logprobs, 0);
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": 20})").logprobs, 20);
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": 21})").error,
            "line 1: field 'logprobs' must be an integer in [0, 20] or a boolean, got 21");
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": -1})").error,
            "line 1: field 'logprobs' must be an integer in [0, 20] or a boolean, got -1");
  EXPECT_EQ(one(R"({"prompt": "p", "logprobs": 2.5})").error,
            "line 1: field 'logprobs' must be an integer in [0, 20] or a boolean, got 2.5");
}

std::string write_temp(const std::string& name, const std::string& content) {
  auto path = (std::filesystem::path(testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(CountPromptLines, CountsNonBlankLinesWithOrWithoutTrailingNewline) {
  auto a = write_temp("count_a.txt", "one\n\n  \t\ntwo\r\n\r\nthree");
  EXPECT_EQ(count_prompt_lines(a), std::optional<size_t>(3));
  auto b = write_temp("count_b.txt", "\xEF\xBB\xBF\n x\n\n");
  EXPECT_EQ(count_prompt_lines(b), std::optional<size_t>(1));  // a lone byte-order mark is blank
  auto c = write_temp("count_c.txt", "");
  EXPECT_EQ(count_prompt_lines(c), std::optional<size_t>(0));
  for (const std::string& p : {a, b, c}) std::filesystem::remove(p);
}

TEST(CountPromptLines, AgreesWithTheReaderAcrossChunkBoundaries) {
  std::string content;
  for (int i = 0; i < 300000; ++i)
    content += i % 3 == 0 ? "\n" : "prompt number " + std::to_string(i) + "\n";
  content += "last";
  auto path = write_temp("count_big.txt", content);
  size_t from_reader = 0;
  PromptReader reader(path, {});
  while (reader.next(true)) ++from_reader;
  EXPECT_EQ(from_reader, 200001u);
  EXPECT_EQ(count_prompt_lines(path), std::optional<size_t>(from_reader));
  std::filesystem::remove(path);
}

TEST(CountPromptLines, PipesDevicesAndMissingFilesHaveNoCount) {
  auto fifo = (std::filesystem::path(testing::TempDir()) / "count_fifo").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(count_prompt_lines(fifo).has_value());
  EXPECT_EQ(detect_input_format(fifo), InputFormat::kText);  // never sniffed: it cannot be reread
  std::filesystem::remove(fifo);
  EXPECT_FALSE(count_prompt_lines("/dev/null").has_value());
  EXPECT_FALSE(count_prompt_lines(testing::TempDir() + "/no_such_count_file.txt").has_value());
}

}  // namespace
}  // namespace tpllama
