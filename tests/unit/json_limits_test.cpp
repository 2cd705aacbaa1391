// The JSON nesting limit (core/json_text): counted outside strings, and applied where request lines
// and model files are read, so a value nested thousands deep is refused by name (its line's error
// record, or the file named) before any recursive walk of it can overflow the stack.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json_text.h"
#include "io/prompt_reader.h"
#include "model/config.h"
#include "temp_files.h"

namespace tpllama {
namespace {

std::string nested(size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

TEST(JsonDepth, LevelsPastTheLimitAreRefusedWhereTheyStart) {
  EXPECT_EQ(json_depth_error(nested(256)), std::nullopt);
  EXPECT_EQ(json_depth_error(nested(257)), "JSON nested deeper than 256 levels (at byte 256)");
  EXPECT_EQ(json_depth_error("{\"a\": " + nested(300) + "}"),
            "JSON nested deeper than 256 levels (at byte 261)");
  // Closed levels do not count: 300 arrays one after another are one level each.
  std::string flat;
  for (int i = 0; i < 300; ++i) flat += "[],";
  EXPECT_EQ(json_depth_error("[" + flat + "[]]"), std::nullopt);
}

TEST(JsonDepth, BracketsInsideStringsAreText) {
  const std::string brackets(1000, '[');
  EXPECT_EQ(json_depth_error("{\"k\": \"" + brackets + "\"}"), std::nullopt);
  // An escaped quote does not end the string; an escaped backslash before the quote does.
  EXPECT_EQ(json_depth_error("[\"\\\"" + brackets + "\"]"), std::nullopt);
  EXPECT_EQ(json_depth_error("[\"\\\\\"" + nested(256) + "]"),
            "JSON nested deeper than 256 levels (at byte 260)");
}

// Members past the bound are refused where the first one too many starts: an array's first member
// counts at its '[', each further one at its comma; commas inside strings are text.
TEST(JsonDepth, ValuesPastTheLineBoundAreRefused) {
  EXPECT_EQ(json_depth_error("[1,2,3]", 3), std::nullopt);
  EXPECT_EQ(json_depth_error("[1,2,3,4]", 3), "JSON of more than 3 values (at byte 6)");
  EXPECT_EQ(json_depth_error("{\"a\": [], \"b\": \",,,,\"}", 3), std::nullopt);
  EXPECT_EQ(json_depth_error("[[],[],[]]", 3), "JSON of more than 3 values (at byte 4)");
  EXPECT_EQ(json_depth_error(std::string(100, '['), SIZE_MAX), std::nullopt) << "no bound";
}

std::vector<Request> read_lines(const std::string& content, InputFormat format) {
  std::istringstream in(content);
  PromptReader reader(in, format, RequestDefaults{}, "test.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

// Issue 28's line: a message with an extra key nested 20,000 deep (40 KB) killed the job, records
// before it lost. It is its own line's error record; the lines around it are read.
TEST(JsonDepth, ADeepChatMessageIsItsLinesErrorRecord) {
  const std::string head =
      R"({"id": "deep", "messages": [{"role": "user", "content": "Hi", "extra": )";
  const std::string jsonl =
      "{\"prompt\": \"a\"}\n" + head + nested(20000) + "}]}\n{\"prompt\": \"b\"}\n";
  std::vector<Request> r = read_lines(jsonl, InputFormat::kJsonl);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].error, "");
  // Levels: the line's object, "messages", the message: the 254th '[' opens level 257.
  EXPECT_EQ(r[1].error, "line 2: not read: JSON nested deeper than 256 levels (at byte " +
                            std::to_string(head.size() + 253) + ")");
  EXPECT_EQ(r[2].error, "");
  EXPECT_EQ(r[2].prompt, "b");
}

TEST(JsonDepth, ADeepBatchLineIsItsLinesErrorRecord) {
  const std::string head =
      R"({"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "Hi", "x": )";
  const std::string good =
      R"({"custom_id": "good", "method": "POST", "url": "/v1/completions", "body": {"prompt": "b", "max_tokens": 2}})";
  std::vector<Request> r =
      read_lines(head + nested(20000) + "}]}}\n" + good + "\n", InputFormat::kOpenAiBatch);
  ASSERT_EQ(r.size(), 2u);
  // Levels: the line, "body", "messages", the message: the 253rd '[' opens level 257.
  EXPECT_EQ(r[0].error, "line 1: not read: JSON nested deeper than 256 levels (at byte " +
                            std::to_string(head.size() + 252) + ")");
  EXPECT_EQ(r[1].error, "");
  EXPECT_EQ(r[1].prompt, "b");
}

TEST(JsonDepth, ADeepModelConfigIsRefusedByName) {
  const std::string path = test_files::remove_at_exit(::testing::TempDir() + "deep_config_" +
                                                      std::to_string(::getpid()) + ".json");
  const std::string head = R"({"vocab_size": 32, "extra": )";
  std::ofstream(path) << head << nested(100000) << "}";
  try {
    load_llama_config(path);
    ADD_FAILURE() << "a config nested 100000 deep was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": JSON nested deeper than 256 levels (at byte " +
                                         std::to_string(head.size() + 255) + ")");
  }
}

}  // namespace
}  // namespace tpllama
