// OpenAI batch files: request lines into Requests (every body field, every rejection naming its
// line), content-based format detection, and the batch output record for success and error.
#include "io/openai_batch.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

#include "core/error.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"

namespace tpllama {
namespace {

using nlohmann::json;

std::vector<Request> read_batch(const std::string& content, RequestDefaults defaults = {}) {
  std::istringstream in(content);
  PromptReader reader(in, InputFormat::kOpenAiBatch, defaults, "batch.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

// One batch line for /v1/completions with the given body (and custom_id "c").
std::string line_with_body(const std::string& body) {
  return R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": )" + body +
         "}\n";
}

std::set<std::string> keys_of(const json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

std::string write_file(const std::string& name, const std::string& content) {
  auto path = (std::filesystem::path(testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(OpenAiBatchInput, EveryBodyFieldReachesTheRequest) {
  RequestDefaults d;
  d.max_tokens = 99;
  auto reqs = read_batch(
      R"({"custom_id": "req-1", "method": "POST", "url": "/v1/completions", "body": )"
      R"({"model": "stories", "prompt": "Once upon", "max_tokens": 12, "temperature": 0.5,)"
      R"( "top_p": 0.8, "top_k": 7, "min_p": 0.1, "seed": 42, "stop": ["\n", "END"],)"
      R"( "logprobs": 3, "n": 1, "echo": false}})"
      "\n",
      d);
  ASSERT_EQ(reqs.size(), 1u);
  const Request& r = reqs[0];
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.id, json("req-1"));
  EXPECT_EQ(r.line, 1u);
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.8);
  EXPECT_EQ(r.sampling.top_k, 7);
  EXPECT_DOUBLE_EQ(r.sampling.min_p, 0.1);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.logprobs, 3);
}

TEST(OpenAiBatchInput, UnsetFieldsKeepDefaultsAndPromptListOfOneIsAccepted) {
  RequestDefaults d;
  d.max_tokens = 33;
  d.sampling.temperature = 0.25;
  auto reqs = read_batch(line_with_body(R"({"prompt": ["only one"], "logprobs": null})"), d);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  EXPECT_EQ(reqs[0].prompt, "only one");
  EXPECT_EQ(reqs[0].max_tokens, 33);
  EXPECT_DOUBLE_EQ(reqs[0].sampling.temperature, 0.25);
  EXPECT_EQ(reqs[0].logprobs, -1);
}

TEST(OpenAiBatchInput, UnsupportedRequestsAreErrorRecordsNamingTheLine) {
  const std::string ok_body = R"({"prompt": "p"})";
  auto reqs = read_batch(
      "\n" +
      std::string(R"({"custom_id": "chat", "url": "/v1/embeddings", "body": {"prompt": "p"}})") +
      "\n" + line_with_body(R"({"prompt": "p", "best_of": 2})") +
      line_with_body(R"({"prompt": "p", "suffix": "s"})") +
      R"({"url": "/v1/completions", "body": {"prompt": "p"}})"
      "\n" +
      R"({"custom_id": 5, "url": "/v1/completions", "body": {"prompt": "p"}})"
      "\n" +
      R"({"custom_id": "g", "method": "GET", "url": "/v1/completions", "body": {"prompt": "p"}})"
      "\n" +
      line_with_body(ok_body));
  ASSERT_EQ(reqs.size(), 7u);
  EXPECT_EQ(reqs[0].error,
            "line 2: field 'url' is \"/v1/embeddings\": only /v1/completions and "
            "/v1/chat/completions are "
            "supported");
  EXPECT_EQ(reqs[0].id, json("chat"));
  EXPECT_EQ(reqs[1].error,
            "line 3: field 'body.best_of' is 2: tpllama does not support it (only 1, which has no "
            "effect); ask for samples with 'n' (vLLM's V1 engine dropped best_of for it too)");
  EXPECT_EQ(reqs[2].error,
            "line 4: field 'body.suffix' is \"s\": tpllama does not support it (only null, which "
            "has no effect)");
  EXPECT_EQ(reqs[3].error, "line 5: missing required field 'custom_id'");
  EXPECT_TRUE(reqs[3].id.is_null()) << "no custom_id: none is made up";
  EXPECT_EQ(reqs[4].error, "line 6: field 'custom_id' must be a string, got 5");
  EXPECT_TRUE(reqs[4].id.is_null());
  EXPECT_EQ(reqs[5].error, "line 7: field 'method' must be \"POST\", got \"GET\"");
  EXPECT_EQ(reqs[5].id, json("g"));
  // A wrong envelope makes the line no request; a body field the endpoint refuses does not.
  for (size_t i : {0u, 3u, 4u, 5u}) EXPECT_TRUE(reqs[i].line_failed) << i;
  for (size_t i : {1u, 2u}) EXPECT_FALSE(reqs[i].line_failed) << i;
  EXPECT_TRUE(reqs[6].error.empty()) << reqs[6].error;  // bad lines do not end the stream
  EXPECT_EQ(reqs[6].line, 8u);
}

TEST(OpenAiBatchInput, BadBodyFieldsNameTheBodyPath) {
  auto reqs = read_batch(line_with_body(R"({"prompt": ["a", "b"]})") +
                         line_with_body(R"({"prompt": [1, -2, 3]})") +
                         line_with_body(R"({"max_tokens": 3})") +
                         line_with_body(R"({"prompt": "p", "temperature": -1})") +
                         line_with_body(R"({"prompt": "p", "logprobs": true})") +
                         line_with_body(R"({"prompt": "p", "logprobs": 21})") +
                         R"({"custom_id": "c", "url": "/v1/completions", "body": "p"})"
                         "\n" +
                         R"({"custom_id": "c", "body": {"prompt": "p"}})"
                         "\n");
  ASSERT_EQ(reqs.size(), 8u);
  EXPECT_EQ(reqs[0].error,
            "line 1: field 'body.prompt' must be a string, a list of token ids, or a list of one "
            "of either, got "
            "[\"a\",\"b\"]");
  EXPECT_EQ(reqs[1].error,
            "line 2: field 'body.prompt' must be a string or a list of token ids (integers >= 0); "
            "element 1 is -2");
  EXPECT_EQ(reqs[2].error, "line 3: missing required field 'body.prompt'");
  EXPECT_EQ(reqs[3].error, "line 4: field 'body.temperature' must be a number >= 0, got -1");
  EXPECT_EQ(reqs[4].error, "line 5: field 'body.logprobs' must be an integer in [0, 20], got true");
  EXPECT_EQ(reqs[5].error, "line 6: field 'body.logprobs' must be an integer in [0, 20], got 21");
  EXPECT_EQ(reqs[6].error, "line 7: field 'body' must be an object, got \"p\"");
  EXPECT_EQ(reqs[7].error,
            "line 8: missing required field 'url' (/v1/completions or /v1/chat/completions)");
}

// The completions API's token-id forms of one prompt: a list of ids, or a list of one such list.
TEST(OpenAiBatchInput, TokenIdPromptsAreTakenAsGiven) {
  auto reqs = read_batch(
      line_with_body(R"({"prompt": [1, 403, 407]})") + line_with_body(R"({"prompt": [[1, 5]]})") +
      line_with_body(R"({"prompt": [[1], [2]]})") + line_with_body(R"({"prompt": []})"));
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  EXPECT_EQ(reqs[0].token_ids, (std::vector<int>{1, 403, 407}));
  EXPECT_TRUE(reqs[0].prompt.empty());
  EXPECT_EQ(reqs[1].token_ids, (std::vector<int>{1, 5}));
  EXPECT_NE(reqs[2].error.find("must be a string, a list of token ids, or a list of one of either"),
            std::string::npos)
      << reqs[2].error;
  EXPECT_EQ(reqs[3].error, "line 4: field 'body.prompt' is an empty list: no token to start from");
}

TEST(OpenAiBatchInput, PenaltiesBiasAndVllmStopFieldsAreRead) {
  auto reqs = read_batch(
      line_with_body(
          R"({"prompt": "p", "frequency_penalty": 0.3, "presence_penalty": -0.5,)"
          R"( "repetition_penalty": 1.2, "logit_bias": {"7": -100, "12": 2.5}, "min_tokens": 3,)"
          R"( "stop_token_ids": [4, 5], "include_stop_str_in_output": true,)"
          R"( "skip_special_tokens": false})") +
      line_with_body(R"({"prompt": "p", "frequency_penalty": 2.5})") +
      line_with_body(R"({"prompt": "p", "logit_bias": {"-3": 1}})"));
  ASSERT_EQ(reqs.size(), 3u);
  ASSERT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  const LogitRules& r = reqs[0].logit_rules;
  EXPECT_DOUBLE_EQ(r.frequency_penalty, 0.3);
  EXPECT_DOUBLE_EQ(r.presence_penalty, -0.5);
  EXPECT_DOUBLE_EQ(r.repetition_penalty, 1.2);
  EXPECT_EQ(r.min_tokens, 3);
  const std::vector<std::pair<int32_t, float>> bias = {{7, -100.0f}, {12, 2.5f}};
  EXPECT_EQ(r.logit_bias, bias);
  EXPECT_EQ(reqs[0].stop_token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(reqs[0].include_stop_str_in_output);
  EXPECT_FALSE(reqs[0].skip_special_tokens);
  EXPECT_EQ(reqs[1].error,
            "line 2: field 'body.frequency_penalty' must be a number in [-2, 2], got 2.5");
  EXPECT_NE(reqs[2].error.find("'body.logit_bias' has the key \"-3\": keys must be token ids"),
            std::string::npos)
      << reqs[2].error;
}

// body.model names the model a batch was made for; the run's own model answers, which is said once
// when the names differ, and not at all when they match.
TEST(OpenAiBatchInput, ARequestedModelOtherThanTheRunsIsSaidOnce) {
  const std::string batch = line_with_body(R"({"prompt": "a", "model": "gpt-4o"})") +
                            line_with_body(R"({"prompt": "b", "model": "gpt-4o"})");
  for (const std::string& answering : {std::string("stories260K"), std::string("gpt-4o")}) {
    std::istringstream in(batch);
    PromptReader reader(in, InputFormat::kOpenAiBatch, RequestDefaults{}, "batch.jsonl");
    reader.set_answering_model(answering);
    testing::internal::CaptureStderr();
    while (reader.next(true)) {
    }
    const std::string err = testing::internal::GetCapturedStderr();
    const size_t said = testing_util::count_occurrences(
        err, "asks for model \"gpt-4o\": stories260K (--model) answers");
    EXPECT_EQ(said, answering == "gpt-4o" ? 0u : 1u) << err;
    EXPECT_EQ(testing_util::count_occurrences(err, "ignoring unknown field"), 0u) << err;
  }
}

TEST(InputFormatDetection, OpenAiContentWinsOverJsonlExtension) {
  auto path =
      write_file("detect_openai.jsonl", "\n  \n" + line_with_body(R"({"prompt": "from batch"})"));
  EXPECT_EQ(detect_input_format(path), InputFormat::kOpenAiBatch);
  PromptReader reader(path, {});
  EXPECT_EQ(reader.format(), InputFormat::kOpenAiBatch);
  auto r = reader.next(true);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->prompt, "from batch");
  EXPECT_EQ(r->id, json("c"));
  std::filesystem::remove(path);
}

// A malformed first line (a torn export, a stray header) does not turn a batch file into JSONL,
// whose every line would then be an error for lacking 'prompt'.
TEST(InputFormatDetection, AMalformedFirstLineDoesNotHideABatchFile) {
  auto path = write_file("detect_torn.jsonl", "{\"custom_id\": \"a\", \"bo\n[1, 2]\n" +
                                                  line_with_body(R"({"prompt": "p"})"));
  EXPECT_EQ(detect_input_format(path), InputFormat::kOpenAiBatch);
  // The first object decides: a plain JSONL object first keeps the file JSONL.
  auto plain = write_file("detect_first.jsonl",
                          "oops\n{\"prompt\": \"x\"}\n" + line_with_body(R"({"prompt": "p"})"));
  EXPECT_EQ(detect_input_format(plain), InputFormat::kJsonl);
  // A text line ends the search: a prompt file that quotes a batch request later stays text.
  auto text = write_file("detect_quote.txt",
                         "Summarise this request:\n" + line_with_body(R"({"prompt": "p"})"));
  EXPECT_EQ(detect_input_format(text), InputFormat::kText);
  std::filesystem::remove(path);
  std::filesystem::remove(plain);
  std::filesystem::remove(text);
}

TEST(InputFormatDetection, JsonTextInATxtFileStaysText) {
  auto path = write_file("detect_text.txt", "{\"id\": \"q\", \"prompt\": \"x\"}\n");
  EXPECT_EQ(detect_input_format(path), InputFormat::kText);
  auto jsonl = write_file("detect_plain.jsonl", "{\"id\": \"q\", \"prompt\": \"x\"}\n");
  EXPECT_EQ(detect_input_format(jsonl), InputFormat::kJsonl);
  std::filesystem::remove(path);
  std::filesystem::remove(jsonl);
}

TEST(InputFormatDetection, ExplicitFormatOverridesDetection) {
  auto path = write_file("explicit.jsonl", line_with_body(R"({"prompt": "p"})"));
  PromptReader as_text(path, {}, InputFormat::kText);
  EXPECT_EQ(as_text.format(), InputFormat::kText);
  auto t = as_text.next(true);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->prompt + "\n", line_with_body(R"({"prompt": "p"})"));
  PromptReader as_jsonl(path, {}, InputFormat::kJsonl);
  auto j = as_jsonl.next(true);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->error, "line 1: missing required field 'prompt'");
  PromptReader detected(path, {}, std::nullopt);
  EXPECT_EQ(detected.format(), InputFormat::kOpenAiBatch);
  std::filesystem::remove(path);
}

TEST(InputFormatDetection, ParseInputFormatNames) {
  EXPECT_EQ(parse_input_format("text"), InputFormat::kText);
  EXPECT_EQ(parse_input_format("jsonl"), InputFormat::kJsonl);
  EXPECT_EQ(parse_input_format("openai"), InputFormat::kOpenAiBatch);
  EXPECT_FALSE(parse_input_format("auto").has_value());
  EXPECT_THROW(parse_input_format("csv"), Error);
}

Result finished(json id) {
  Result r;
  r.id = std::move(id);
  r.text = " there was";
  r.prompt_tokens = 4;
  r.completion_tokens = 3;
  r.finish_reason = "length";
  return r;
}

TEST(OpenAiBatchOutput, SuccessRecordHasEveryKey) {
  const auto before = static_cast<int64_t>(std::time(nullptr));
  std::string line =
      result_to_json_line(finished("req-1"), OutputFormat::kOpenAiBatch, RecordOrigin{"llama", ""});
  const auto after = static_cast<int64_t>(std::time(nullptr));
  ASSERT_EQ(line.back(), '\n');
  json j = json::parse(line);
  const std::string hex = "b9e4d3ee2a909869";  // FNV-1a 64 of "\"req-1\"", computed separately
  EXPECT_EQ(keys_of(j), (std::set<std::string>{"id", "custom_id", "response", "error"}));
  EXPECT_EQ(j["id"], "batch_req_" + hex);
  EXPECT_EQ(j["custom_id"], "req-1");
  EXPECT_TRUE(j["error"].is_null());
  const json& resp = j["response"];
  EXPECT_EQ(keys_of(resp), (std::set<std::string>{"status_code", "request_id", "body"}));
  EXPECT_EQ(resp["status_code"], 200);
  EXPECT_EQ(resp["request_id"], hex);
  const json& body = resp["body"];
  EXPECT_EQ(keys_of(body), (std::set<std::string>{"id", "object", "created", "model",
                                                  "system_fingerprint", "choices", "usage"}));
  EXPECT_EQ(body["id"], "cmpl-" + hex);
  EXPECT_EQ(body["object"], "text_completion");
  ASSERT_TRUE(body["created"].is_number_integer());
  EXPECT_GE(body["created"].get<int64_t>(), before);
  EXPECT_LE(body["created"].get<int64_t>(), after);
  EXPECT_EQ(body["model"], "llama");
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0],
            json::parse(R"({"index": 0, "text": " there was", "finish_reason": "length",
                            "stop_reason": null, "logprobs": null})"));
  EXPECT_EQ(body["usage"],
            json::parse(R"({"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7})"));
}

// OpenAI's record of a request its endpoint refused: the 400 is the response, and "error" (kept for
// failures that never reached an endpoint) is null.
TEST(OpenAiBatchOutput, ARefusedRequestIsA400ResponseWithANullError) {
  Result r = finished("bad");
  r.finish_reason = "error";
  r.error = "line 3: field 'body.n' is 2: only n = 1 is supported";
  json j = json::parse(result_to_json_line(r, OutputFormat::kOpenAiBatch, RecordOrigin{"m", ""}));
  const std::string hex = "618074ccf1d290ee";  // FNV-1a 64 of "\"bad\""
  EXPECT_EQ(j, json::parse(R"({"id": "batch_req_618074ccf1d290ee", "custom_id": "bad",
      "response": {"status_code": 400, "request_id": ")" +
                           hex + R"(", "body": {"error": {"message": ")" + r.error +
                           R"(", "type": "invalid_request_error", "param": null, "code": null}}},
      "error": null})"));
}

// A line that never became a request (here, one whose custom_id could not be read): no response,
// the error object, custom_id null; its line keeps it apart (and tells --resume which line it is).
TEST(OpenAiBatchOutput, ALineThatIsNoRequestHasANullResponseAndTheError) {
  Result r;
  r.id = json(nullptr);
  r.finish_reason = "error";
  r.error = "line 4: not valid JSON: parse error";
  r.line = 4;
  r.line_failed = true;
  json j = json::parse(result_to_json_line(r, OutputFormat::kOpenAiBatch, RecordOrigin{"m", ""}));
  // FNV-1a 64 of "line:4", the key of an error record by its line.
  EXPECT_EQ(j,
            json::parse(R"({"id": "batch_req_aba659c5ec503fc9", "custom_id": null, "response": null,
      "error": {"code": "invalid_request", "message": "line 4: not valid JSON: parse error"}, "line": 4})"));
}

TEST(OpenAiBatchOutput, IntegerIdFromALineNumberIsKeptAsCustomId) {
  json j = json::parse(result_to_json_line(finished(7), OutputFormat::kOpenAiBatch));
  EXPECT_EQ(j["custom_id"], json(7));
  EXPECT_EQ(j["id"], "batch_req_af63aa4c86019796");  // FNV-1a 64 of "7"
  EXPECT_EQ(j["response"]["body"]["model"], "");
}

TEST(OpenAiBatchOutput, LogprobsUseTheLegacyCompletionsLayout) {
  Result r = finished("req-1");
  r.logprobs = std::vector<TokenLogprob>{{" there", -0.5, {{" there", -0.5}, {" a", -1.25}}},
                                         {" was", -0.125, {{" was", -0.125}}}};
  json j = json::parse(result_to_json_line(r, OutputFormat::kOpenAiBatch, RecordOrigin{"m", ""}));
  EXPECT_EQ(j["response"]["body"]["choices"][0]["logprobs"],
            json::parse(R"({"tokens": [" there", " was"], "token_logprobs": [-0.5, -0.125],
                            "top_logprobs": [{" there": -0.5, " a": -1.25}, {" was": -0.125}],
                            "text_offset": [0, 6]})"));
}

TEST(OpenAiBatchOutput, InvalidUtf8IsReplacedNotThrown) {
  Result r = finished(std::string("c\xff"));
  r.text = "ab\xc3";
  r.logprobs = std::vector<TokenLogprob>{{"\xe2\x82", -1.0, {{"\xe2\x82", -1.0}}}};
  std::string line;
  ASSERT_NO_THROW(line = result_to_json_line(r, OutputFormat::kOpenAiBatch, RecordOrigin{"m", ""}));
  json j = json::parse(line);
  EXPECT_EQ(j["response"]["body"]["choices"][0]["text"], "ab\xEF\xBF\xBD");
  EXPECT_EQ(j["custom_id"], "c\xEF\xBF\xBD");
}

TEST(OpenAiBatchOutput, WriterInOpenAiFormatWritesBatchLines) {
  auto path = (std::filesystem::path(testing::TempDir()) / "openai_out.jsonl").string();
  {
    ResultWriter w(path, OutputFormat::kOpenAiBatch, false, RecordOrigin{"model-x", ""});
    EXPECT_EQ(w.format(), OutputFormat::kOpenAiBatch);
    w.write(finished("a"));
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  json j = json::parse(line);
  EXPECT_EQ(j["custom_id"], "a");
  EXPECT_EQ(j["response"]["body"]["model"], "model-x");
  EXPECT_FALSE(std::getline(in, line));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tpllama
