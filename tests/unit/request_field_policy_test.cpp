// Fields a request may carry that tpllama does not read: those that change no output are taken
// quietly (at any value, or at their OpenAI / vLLM default), and every other one makes that line an
// error record naming the field, in JSONL lines and OpenAI batch bodies alike.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "io/prompt_reader.h"

namespace tpllama {
namespace {

std::vector<Request> read(const std::string& content, InputFormat format) {
  std::istringstream in(content);
  PromptReader reader(in, format, RequestDefaults{}, "fields.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

// One JSONL line per extra: a completion request with `extra` after its prompt.
std::string prompt_line(const std::string& extra) {
  return R"({"prompt": "p", )" + extra + "}\n";
}
std::string chat_line(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "Hi"}], )" + extra + "}\n";
}
std::string batch_line(const std::string& url, const std::string& body) {
  return R"({"custom_id": "c", "method": "POST", "url": ")" + url + R"(", "body": )" + body + "}\n";
}

// Each case's lines are read in one input, so a warning said once per name would show up here.
void expect_taken_quietly(const std::string& content, InputFormat format) {
  testing::internal::CaptureStderr();
  const std::vector<Request> reqs = read(content, format);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(reqs.empty());
  for (const Request& r : reqs)
    EXPECT_TRUE(r.error.empty()) << "line " << r.line << ": " << r.error;
  EXPECT_EQ(err, "") << "nothing to warn about: these fields change nothing";
}

TEST(RequestFieldPolicy, FieldsThatChangeNothingAreTakenQuietlyAtAnyValue) {
  const std::string inert =
      R"("model": "gpt-4o", "user": "u1", "metadata": {"k": "v"}, "store": true,)"
      R"( "service_tier": "flex", "stream": true, "stream_options": {"include_usage": true},)"
      R"( "parallel_tool_calls": false, "request_id": "r", "safety_identifier": "s",)"
      R"( "prompt_cache_key": "k", "cache_salt": "salt")";
  expect_taken_quietly(prompt_line(inert) + chat_line(inert), InputFormat::kJsonl);
  expect_taken_quietly(
      batch_line("/v1/completions", R"({"prompt": "p", )" + inert + "}") +
          batch_line("/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "Hi"}], )" + inert + "}"),
      InputFormat::kOpenAiBatch);
}

// Each at the default OpenAI's or vLLM's documentation gives it, which is what tpllama does anyway.
TEST(RequestFieldPolicy, UnimplementedFieldsAreTakenAtTheirDefaultOrNull) {
  const std::string both =
      R"("n": 1, "best_of": 1, "presence_penalty": 0, "frequency_penalty": 0.0,)"
      R"( "repetition_penalty": 1.0, "length_penalty": 1, "logit_bias": {}, "min_tokens": 0,)"
      R"( "stop_token_ids": [], "bad_words": [], "echo": false, "use_beam_search": false,)"
      R"( "include_stop_str_in_output": false, "skip_special_tokens": true,)"
      R"( "spaces_between_special_tokens": true, "return_tokens_as_token_ids": false,)"
      R"( "priority": 0, "response_format": {"type": "text"}, "suffix": null,)"
      R"( "guided_json": null, "structured_outputs": null, "prompt_logprobs": null)";
  const std::string chat =
      R"(, "add_generation_prompt": true, "continue_final_message": false, "documents": null,)"
      R"( "tool_choice": "none", "modalities": ["text"], "reasoning_effort": null)";
  const std::string neutral_chat_options =
      R"(, "add_generation_prompt": true, "continue_final_message": false, "documents": null)";
  expect_taken_quietly(
      prompt_line(both + R"(, "add_special_tokens": true)" + neutral_chat_options) +
          chat_line(both + chat + R"(, "add_special_tokens": false)") +
          R"({"context": "a", "continuation": "b", "add_special_tokens": true})"
          "\n",
      InputFormat::kJsonl);
  expect_taken_quietly(batch_line("/v1/completions", R"({"prompt": "p", )" + both +
                                                         R"(, "add_special_tokens": true})") +
                           batch_line("/v1/chat/completions",
                                      R"({"messages": [{"role": "user", "content": "Hi"}], )" +
                                          both + chat + R"(, "add_special_tokens": false})"),
                       InputFormat::kOpenAiBatch);
}

struct Refused {
  std::string line;
  std::string error;
};

// The fields of tpllama issue 28 item 11, each of which changes the output: an error record each.
TEST(RequestFieldPolicy, FieldsThatWouldChangeTheOutputAreErrorRecordsNamingThem) {
  const std::vector<Refused> cases = {
      {prompt_line(R"("response_format": {"type": "structural_tag", "format": {}})"),
       R"(line 1: field 'response_format.type' is "structural_tag": tpllama takes "text", )"
       R"("json_object" and "json_schema" (for a regex, choice or grammar use vLLM's )"
       R"('structured_outputs'))"},
      {chat_line(R"("tool_choice": "required")"),
       R"(line 1: field 'tool_choice' is "required": tpllama does not support it (only "none", which has no effect))"},
      {R"({"context": "a", "continuation": "b", "min_tokens": 5})"
       "\n",
       "line 1: field 'min_tokens' is 5: a scoring request scores the model's own distribution "
       "(only 0, which has no effect)"},
      // A chat request reads these three (chat_requests_test.cpp); no other request has a
      // template to give them to.
      {prompt_line(R"("continue_final_message": true)"),
       "line 1: field 'continue_final_message' is true: tpllama does not support it (only false, "
       "which has no "
       "effect)"},
      {prompt_line(R"("add_generation_prompt": false)"),
       "line 1: field 'add_generation_prompt' is false: tpllama does not support it (only true, "
       "which has no "
       "effect)"},
      {R"({"context": "a", "continuation": "b", "documents": [{"text": "d"}]})"
       "\n",
       R"(line 1: field 'documents' is [{"text":"d"}]: tpllama does not support it (only null, )"
       "which has no effect)"},
      {R"({"context": "a", "continuation": "b", "skip_special_tokens": false})"
       "\n",
       "line 1: field 'skip_special_tokens' is false: a scoring request scores the model's own "
       "distribution (only true, which has no effect)"},
      {chat_line(R"("add_special_tokens": true)"),
       "line 1: field 'add_special_tokens' is true: tpllama does not support it (only false, which "
       "has no effect)"},
      {prompt_line(R"("add_special_tokens": false)"),
       "line 1: field 'add_special_tokens' is false: tpllama does not support it (only true, which "
       "has no effect)"},
      {prompt_line(R"("suffix": "!")"),
       R"(line 1: field 'suffix' is "!": tpllama does not support it (only null, which has no effect))"},
      {prompt_line(R"("max_token": 5)"),
       "line 1: unknown field 'max_token' for a completion request: refused, as ignoring it could "
       "change the "
       "output"},
      {prompt_line(R"("frobnicate": null)"),
       "line 1: unknown field 'frobnicate' for a completion request: refused, as ignoring it could "
       "change the "
       "output"},
      {prompt_line(R"("tools": [])"),
       "line 1: unknown field 'tools' for a completion request: refused, as ignoring it could "
       "change the output"},
      {R"({"context": "a", "continuation": "b", "top_logprobs": 2})"
       "\n",
       "line 1: unknown field 'top_logprobs' for a scoring request: refused, as ignoring it could "
       "change the "
       "output"},
  };
  for (const Refused& c : cases) {
    SCOPED_TRACE(c.line);
    const std::vector<Request> reqs = read(c.line + R"({"prompt": "next"})"
                                                    "\n",
                                           InputFormat::kJsonl);
    ASSERT_EQ(reqs.size(), 2u);
    EXPECT_EQ(reqs[0].error, c.error);
    EXPECT_FALSE(reqs[0].line_failed)
        << "a request refused for a field, not a line that is no request";
    EXPECT_TRUE(reqs[1].error.empty()) << "the next line is read as usual: " << reqs[1].error;
  }
}

TEST(RequestFieldPolicy, BatchBodiesRefuseTheSameFieldsAndTheOtherEndpointsOnes) {
  const std::vector<Refused> cases = {
      {batch_line(
           "/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": "Hi"}], "response_format": {"type": "json_object", "schema": {}}})"),
       R"(line 1: field 'body.response_format.schema' is not read: a schema goes in {"type": )"
       R"("json_schema", "json_schema": {"schema": ...}})"},
      {batch_line("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "auto"})"),
       R"(line 1: field 'body.tool_choice' is "auto": tpllama does not support it (only "none", which has no effect))"},
      {batch_line("/v1/completions", R"({"prompt": "p", "max_completion_tokens": 5})"),
       "line 1: unknown field 'body.max_completion_tokens' for a completion request: refused, as "
       "ignoring it could "
       "change the output"},
      {batch_line("/v1/completions", R"({"prompt": "p", "messages": []})"),
       "line 1: unknown field 'body.messages' for a completion request: refused, as ignoring it "
       "could change the "
       "output"},
      {batch_line("/v1/completions", R"({"prompt": "p", "continue_final_message": true})"),
       "line 1: field 'body.continue_final_message' is true: tpllama does not support it (only "
       "false, which has no effect)"},
      {batch_line("/v1/completions", R"({"prompt": "p", "documents": []})"),
       "line 1: field 'body.documents' is []: tpllama does not support it (only null, which has no "
       "effect)"},
      {batch_line("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "Hi"}], "prompt": "p"})"),
       "line 1: unknown field 'body.prompt' for a chat request: refused, as ignoring it could "
       "change the output"},
  };
  for (const Refused& c : cases) {
    SCOPED_TRACE(c.line);
    const std::vector<Request> reqs = read(c.line, InputFormat::kOpenAiBatch);
    ASSERT_EQ(reqs.size(), 1u);
    EXPECT_EQ(reqs[0].error, c.error);
    EXPECT_EQ(reqs[0].id, "c");
    EXPECT_FALSE(reqs[0].line_failed) << "a 400 of its endpoint";
  }
}

TEST(RequestFieldPolicy, ABatchLineWithAFieldBesideItsFourIsNoRequest) {
  const std::vector<Request> reqs = read(
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "p"}, "max_tokens": 9})"
      "\n",
      InputFormat::kOpenAiBatch);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].error,
            "line 1: unknown field 'max_tokens' in a batch line (it has custom_id, method, url and "
            "body; the request's "
            "fields go in body)");
  EXPECT_EQ(reqs[0].id, "c");
  EXPECT_TRUE(reqs[0].line_failed);
}

}  // namespace
}  // namespace tpllama
