// Our OpenAI batch records against the shape OpenAI's API reference and vLLM publish
// (tests/data/openai/records.json, written from their docs): every key they show is there with
// the same JSON type, and a key beyond them is one of vLLM's.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/result_writer.h"

namespace tpllama {
namespace {

using nlohmann::json;

json fixture() {
  std::ifstream in(std::string(TPLLAMA_TEST_DATA_DIR) + "/openai/records.json");
  EXPECT_TRUE(in) << "tests/data/openai/records.json is missing";
  return json::parse(in);
}

// Numbers compare as numbers (an integer where the docs show 0.5 is still a number).
bool same_type(const json& a, const json& b) {
  return a.type() == b.type() || (a.is_number() && b.is_number());
}

// Every key of `expected` is in `got` with the same type, recursively (arrays: each element of got
// against the docs' first one); keys of `got` beyond it must be in `extras`.
void expect_shape(const json& got, const json& expected, const std::string& path,
                  const json& extras = json::object()) {
  ASSERT_TRUE(same_type(got, expected))
      << path << ": " << got.type_name() << " where the docs show " << expected.type_name();
  const bool by_token =
      expected.is_object() && path.find("logprobs.top_logprobs[") != std::string::npos;
  if (by_token) {  // the legacy layout's {token text: logprob}: the docs' tokens are not ours
    for (auto it = got.begin(); it != got.end(); ++it)
      EXPECT_TRUE(it.value().is_number()) << path << "." << it.key();
  } else if (expected.is_object() && !expected.empty()) {
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << path << "." << it.key() << " is missing";
      expect_shape(got[it.key()], it.value(), path + "." + it.key(), extras);
    }
    for (auto it = got.begin(); it != got.end(); ++it)
      EXPECT_TRUE(expected.contains(it.key()) || extras.contains(it.key()))
          << path << "." << it.key() << " is in neither OpenAI's nor vLLM's records";
  } else if (expected.is_array() && !expected.empty()) {
    ASSERT_FALSE(got.empty()) << path;
    for (size_t i = 0; i < got.size(); ++i)
      expect_shape(got[i], expected[0], path + "[" + std::to_string(i) + "]", extras);
  }
}

Result finished(bool chat) {
  Result r;
  r.id = "request-2";
  r.chat = chat;
  r.prompt_tokens = 5;
  r.completion_tokens = 4;
  r.finish_reason = "length";
  std::vector<TokenLogprob> lp;
  for (const char* t : {"\n", "\n", "This", " is"}) lp.push_back({t, -0.5, {{t, -0.5}}});
  if (chat) lp.resize(1);
  r.text = chat ? "Hello!" : "\n\nThis is";
  r.logprobs = lp;
  return r;
}

TEST(OpenAiRecords, ACompletionLineHasEveryKeyOfOpenAisLayout) {
  const json f = fixture();
  const json line =
      json::parse(result_to_json_line(finished(false), OutputFormat::kOpenAiBatch,
                                      RecordOrigin{"served-name", "fp_0123456789abcdef"}));
  json envelope = f["batch_line"];
  expect_shape(line, envelope, "line");
  const json& body = line["response"]["body"];
  expect_shape(body, f["completion_body"], "body", f["vllm_choice_extras"]);
  EXPECT_EQ(body["model"], "served-name");
  EXPECT_EQ(body["system_fingerprint"], "fp_0123456789abcdef");
  // text_offset: where each token starts in the text, in code points.
  EXPECT_EQ(body["choices"][0]["logprobs"]["text_offset"], json::parse("[0, 1, 2, 6]"));
}

TEST(OpenAiRecords, AChatLineHasEveryKeyOfOpenAisLayout) {
  const json f = fixture();
  const json line = json::parse(result_to_json_line(finished(true), OutputFormat::kOpenAiBatch,
                                                    RecordOrigin{"m", "fp_0123456789abcdef"}));
  expect_shape(line, f["batch_line"], "line");
  expect_shape(line["response"]["body"], f["chat_body"], "body", f["vllm_choice_extras"]);
}

// n samples: every choice has the layout, numbered by index, and usage counts the prompt once.
TEST(OpenAiRecords, ARecordOfNSamplesHasTheLayoutInEveryChoice) {
  const json f = fixture();
  for (const bool chat : {false, true}) {
    const json line = json::parse(
        result_to_json_line(join_samples({finished(chat), finished(chat), finished(chat)}),
                            OutputFormat::kOpenAiBatch, RecordOrigin{"m", "fp_0123456789abcdef"}));
    expect_shape(line, f["batch_line"], "line");
    const json& body = line["response"]["body"];
    expect_shape(body, f[chat ? "chat_body" : "completion_body"], "body", f["vllm_choice_extras"]);
    ASSERT_EQ(body["choices"].size(), 3u);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(body["choices"][k]["index"], k);
    EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(body["usage"]["completion_tokens"], 12);
    EXPECT_EQ(body["usage"]["total_tokens"], 17);
  }
}

TEST(OpenAiRecords, TextOffsetCountsCodePointsNotBytes) {
  Result r = finished(false);
  r.logprobs = std::vector<TokenLogprob>{{"é", -1.0, {}}, {"日本", -1.0, {}}, {"x", -1.0, {}}};
  const json j = json::parse(result_to_json_line(r));
  EXPECT_EQ(j["logprobs"]["text_offset"], json::parse("[0, 1, 3]"));
}

}  // namespace
}  // namespace tpllama
