// Chat requests: JSONL lines with "messages" and OpenAI batch lines for /v1/chat/completions read
// into Requests (messages kept in their key order, content parts joined, every rejection naming
// its line and field), and chat.completion records written back in OpenAI's layout.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "io/prompt_reader.h"
#include "io/result_writer.h"

namespace tpllama {
namespace {

using nlohmann::json;

std::vector<Request> read(const std::string& content, InputFormat format) {
  std::istringstream in(content);
  PromptReader reader(in, format, RequestDefaults{}, "chat.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

std::string chat_batch_line(const std::string& body) {
  return R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": )" + body +
         "}\n";
}

TEST(ChatRequests, JsonlMessagesKeepTheirKeyOrderAndTheSamplingFields) {
  auto reqs = read(R"({"id": "a", "messages": [{"role": "user", "content": "Hi", "name": "bob"}], )"
                   R"("max_completion_tokens": 7, "temperature": 0, "tools": [{"z": 1, "a": 2}]})"
                   "\n",
                   InputFormat::kJsonl);
  ASSERT_EQ(reqs.size(), 1u);
  const Request& r = reqs[0];
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_TRUE(r.chat());
  EXPECT_EQ(r.messages->dump(), R"([{"role":"user","content":"Hi","name":"bob"}])");
  EXPECT_EQ(r.chat_variables.dump(),
            R"({"tools":[{"z":1,"a":2}]})");  // not sorted: a template may print it
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0);
}

TEST(ChatRequests, TextPartsAreJoinedWithNewlines) {
  auto reqs = read(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "one"}, )"
                   R"({"type": "text", "text": "two"}]}, {"role": "assistant", "content": null}]})"
                   "\n",
                   InputFormat::kJsonl);
  ASSERT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  EXPECT_EQ((*reqs[0].messages)[0]["content"], "one\ntwo");
  EXPECT_TRUE((*reqs[0].messages)[1]["content"].is_null());
}

TEST(ChatRequests, BadConversationsAreErrorRecordsNamingLineAndField) {
  auto reqs = read(
      R"({"messages": []})"
      "\n"
      R"({"messages": [{"content": "no role"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": 5}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "x"}], "prompt": "also"})"
      "\n"
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "max_completion_tokens": 3})"
      "\n",
      InputFormat::kJsonl);
  ASSERT_EQ(reqs.size(), 6u);
  EXPECT_EQ(reqs[0].error, "line 1: field 'messages' must be a non-empty list of messages, got []");
  EXPECT_EQ(reqs[1].error, "line 2: field 'messages[0].role' must be a string, got nothing");
  EXPECT_EQ(
      reqs[2].error,
      "line 3: field 'messages[0].content' must be a string, null or a list of text parts, got 5");
  EXPECT_NE(
      reqs[3].error.find("line 4: field 'messages[0].content[0]' must be {\"type\": \"text\""),
      std::string::npos)
      << reqs[3].error;
  EXPECT_EQ(
      reqs[4].error,
      "line 5: a chat request has 'messages' only, not 'prompt', 'context' or 'continuation'");
  EXPECT_EQ(reqs[5].error,
            "line 6: fields 'max_tokens' and 'max_completion_tokens' are both given: use one");
}

TEST(ChatRequests, OpenAiChatLinesMixWithCompletionLines) {
  auto reqs = read(
      chat_batch_line(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )"
                      R"("max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})") +
          R"({"custom_id": "p", "url": "/v1/completions", "body": {"prompt": "Hi", "logprobs": 2}})"
          "\n",
      InputFormat::kOpenAiBatch);
  ASSERT_EQ(reqs.size(), 2u);
  ASSERT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  EXPECT_TRUE(reqs[0].chat());
  EXPECT_EQ(reqs[0].max_tokens, 9);
  EXPECT_EQ(reqs[0].logprobs, 3);
  ASSERT_TRUE(reqs[1].error.empty()) << reqs[1].error;
  EXPECT_FALSE(reqs[1].chat());
  EXPECT_EQ(reqs[1].logprobs, 2);
}

TEST(ChatRequests, OpenAiChatLogprobFieldsFollowTheChatApi) {
  auto reqs =
      read(chat_batch_line(R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": 2})") +
               chat_batch_line(
                   R"({"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2})") +
               chat_batch_line(
                   R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true})") +
               chat_batch_line(R"({"prompt": "Hi"})"),
           InputFormat::kOpenAiBatch);
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].error, "line 1: field 'body.logprobs' must be true or false, got 2");
  EXPECT_EQ(reqs[1].error, "line 2: field 'body.top_logprobs' needs 'body.logprobs': true");
  EXPECT_TRUE(reqs[2].error.empty());
  EXPECT_EQ(reqs[2].logprobs, 0);  // the chosen token only
  EXPECT_EQ(reqs[3].error, "line 4: missing required field 'body.messages'");
}

const char* kPrefill =
    R"("messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Once"}])";

TEST(ChatRequests, GenerationPromptOptionsAndDocumentsAreRead) {
  const std::string docs = R"("documents": [{"title": "T", "text": "x"}])";
  auto reqs = read(std::string("{") + kPrefill + "}\n" + "{" + kPrefill +
                       R"(, "add_generation_prompt": false})"
                       "\n" +
                       "{" + kPrefill +
                       R"(, "add_generation_prompt": false, "continue_final_message": true, )" +
                       docs + "}\n",
                   InputFormat::kJsonl);
  ASSERT_EQ(reqs.size(), 3u);
  for (const Request& r : reqs) ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(reqs[0].add_generation_prompt);
  EXPECT_FALSE(reqs[0].continue_final_message);
  EXPECT_FALSE(reqs[0].chat_variables.contains("documents"));
  EXPECT_FALSE(reqs[1].add_generation_prompt);
  EXPECT_FALSE(reqs[1].continue_final_message);
  EXPECT_FALSE(reqs[2].add_generation_prompt);
  EXPECT_TRUE(reqs[2].continue_final_message);
  EXPECT_EQ(reqs[2].chat_variables.dump(), R"({"documents":[{"title":"T","text":"x"}]})");

  auto batch = read(chat_batch_line(std::string("{") + kPrefill +
                                    R"(, "add_generation_prompt": false, )"
                                    R"("continue_final_message": true, )" +
                                    docs + "}"),
                    InputFormat::kOpenAiBatch);
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_TRUE(batch[0].error.empty()) << batch[0].error;
  EXPECT_FALSE(batch[0].add_generation_prompt);
  EXPECT_TRUE(batch[0].continue_final_message);
  EXPECT_EQ(batch[0].chat_variables.dump(), R"({"documents":[{"title":"T","text":"x"}]})");
}

// The request's own documents win over a "documents" key of chat_template_kwargs.
TEST(ChatRequests, DocumentsOverChatTemplateKwargs) {
  auto reqs = read(std::string("{") + kPrefill +
                       R"(, "chat_template_kwargs": {"documents": [], "x": 1}, )"
                       R"("documents": [{"text": "mine"}]})"
                       "\n",
                   InputFormat::kJsonl);
  ASSERT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  EXPECT_EQ(reqs[0].chat_variables.dump(), R"({"documents":[{"text":"mine"}],"x":1})");
}

TEST(ChatRequests, BadGenerationPromptOptionsAreErrorRecordsNamingFieldAndValue) {
  const std::string user_last = R"("messages": [{"role": "user", "content": "Hi"}])";
  const std::string silent_last =
      R"("messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null}])";
  auto reqs = read(
      std::string("{") + kPrefill + R"(, "add_generation_prompt": 0})" + "\n{" + kPrefill +
          R"(, "continue_final_message": "yes"})" + "\n{" + kPrefill +
          R"(, "add_generation_prompt": true, "continue_final_message": true})" + "\n{" + kPrefill +
          R"(, "continue_final_message": true})" + "\n{" + user_last +
          R"(, "add_generation_prompt": false, "continue_final_message": true})" + "\n{" +
          silent_last + R"(, "add_generation_prompt": false, "continue_final_message": true})" +
          "\n{" + kPrefill + R"(, "documents": {"text": "x"}})" + "\n{" + kPrefill +
          R"(, "documents": [{"text": "x"}, "y"]})" + "\n",
      InputFormat::kJsonl);
  ASSERT_EQ(reqs.size(), 8u);
  EXPECT_EQ(reqs[0].error, "line 1: field 'add_generation_prompt' must be true or false, got 0");
  EXPECT_EQ(reqs[1].error,
            "line 2: field 'continue_final_message' must be true or false, got \"yes\"");
  EXPECT_EQ(reqs[2].error,
            "line 3: fields 'continue_final_message' and 'add_generation_prompt' are both true: a "
            "continued message opens no new turn, so use one");
  EXPECT_EQ(reqs[3].error,
            "line 4: field 'continue_final_message' is true but 'add_generation_prompt' is not "
            "given, and it is true by default: give it as false (as vLLM requires)");
  EXPECT_EQ(reqs[4].error,
            "line 5: field 'continue_final_message' is true but the last message ('messages[0]') "
            "has role \"user\": only an assistant message can be continued");
  EXPECT_EQ(reqs[5].error,
            "line 6: field 'continue_final_message' is true but the last message ('messages[1]') "
            "has no text content to continue");
  EXPECT_EQ(reqs[6].error,
            "line 7: field 'documents' must be a list of objects, got {\"text\":\"x\"}");
  EXPECT_EQ(reqs[7].error, "line 8: field 'documents[1]' must be an object, got \"y\"");
  for (const Request& r : reqs) EXPECT_FALSE(r.line_failed) << r.error;

  auto batch = read(chat_batch_line(std::string("{") + user_last +
                                    R"(, "add_generation_prompt": false, )"
                                    R"("continue_final_message": true})"),
                    InputFormat::kOpenAiBatch);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].error,
            "line 1: field 'body.continue_final_message' is true but the last message "
            "('body.messages[0]') has role \"user\": only an assistant message can be continued");
}

Result chat_result() {
  Result r;
  r.id = "c";
  r.chat = true;
  r.text = "Hello!";
  r.prompt_tokens = 12;
  r.completion_tokens = 3;
  r.finish_reason = "stop";
  return r;
}

TEST(ChatRecords, AChatCompletionBodyInOpenAisLayout) {
  const json j = json::parse(
      result_to_json_line(chat_result(), OutputFormat::kOpenAiBatch, RecordOrigin{"llama3", ""}));
  const json& body = j["response"]["body"];
  const std::string hex = j["response"]["request_id"];
  EXPECT_EQ(body["id"], "chatcmpl-" + hex);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "llama3");
  EXPECT_EQ(body["choices"],
            json::parse(R"([{"index": 0, "message": {"role": "assistant", "content": "Hello!"},
                                              "logprobs": null, "finish_reason": "stop",
                                              "stop_reason": null}])"));
  EXPECT_EQ(body["usage"],
            json::parse(R"({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15})"));
}

TEST(ChatRecords, LogprobsInTheChatLayoutWithBytes) {
  Result r = chat_result();
  r.logprobs = std::vector<TokenLogprob>{{"Hi", -0.5, {{"Hi", -0.5}, {"bytes:\\xe2\\x82", -2.0}}}};
  const json j =
      json::parse(result_to_json_line(r, OutputFormat::kOpenAiBatch, RecordOrigin{"m", ""}));
  EXPECT_EQ(j["response"]["body"]["choices"][0]["logprobs"], json::parse(R"({"content": [
      {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [
          {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
          {"token": "bytes:\\xe2\\x82", "logprob": -2.0, "bytes": [226, 130]}]}]})"));
}

TEST(ChatRecords, JsonlRecordsOfChatRequestsKeepTheCompletionLayout) {
  const json j = json::parse(result_to_json_line(chat_result()));
  EXPECT_EQ(j["text"], "Hello!");
  EXPECT_EQ(j["finish_reason"], "stop");
}

}  // namespace
}  // namespace tpllama
