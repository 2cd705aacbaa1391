// A chat request's add_generation_prompt and continue_final_message through the binary, on
// stories260K with a --chat-template whose turns end in </s>: tokenize shows the three prompts one
// conversation makes, and run answers a continued conversation from exactly the tokens that end
// with the assistant's unfinished message (the same text as a prompt of those token ids).
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class ChatOptionsCli : public StoriesSuite<ChatOptionsCli> {
 public:
  static constexpr const char* kTag = "chat_options";

 protected:
  // Every turn closed by </s> (stories260K's EOS, a control token), and the assistant's header
  // after the conversation when add_generation_prompt is true.
  std::string write_template() {
    const std::string path = work_ + "/turns.jinja";
    std::ofstream(path) << "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}</s>\n"
                           "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
    return path;
  }
};

const json kStory = json::array({{{"role", "user"}, {"content", "Tell me a story."}},
                                 {{"role", "assistant"}, {"content", "Once upon a time"}}});

json chat(const std::string& id, const json& options) {
  json line = {{"id", id}, {"messages", kStory}, {"max_tokens", 12}, {"temperature", 0}};
  line.update(options);
  return line;
}

void write_lines(const std::string& path, const std::vector<json>& lines) {
  std::ofstream out(path);
  for (const json& l : lines) out << l.dump() << "\n";
}

std::vector<int> tokens_of(const json& record) {
  return record.at("tokens").get<std::vector<int>>();
}

TEST_F(ChatOptionsCli, AContinuedMessageIsThePromptsEndAndTheModelGoesOnFromIt) {
  const std::string tmpl = write_template(), in = work_ + "/chats.jsonl";
  write_lines(in,
              {chat("next", json::object()), chat("closed", {{"add_generation_prompt", false}}),
               chat("open", {{"add_generation_prompt", false}, {"continue_final_message", true}}),
               json{{"id", "words"}, {"prompt", "Once upon a time"}}});
  const CommandResult t =
      run_shell(binary() + " tokenize --model " + model_ + " --chat-template " + tmpl +
                " --input " + in + " --output " + work_ + "/tokens.jsonl");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const auto tok = by_id(read_jsonl(work_ + "/tokens.jsonl"));
  const std::string closed_text = "user: Tell me a story.</s>\nassistant: Once upon a time</s>\n";
  EXPECT_EQ(tok.at("\"next\"")["text"], closed_text + "assistant:");
  EXPECT_EQ(tok.at("\"closed\"")["text"], closed_text);
  EXPECT_EQ(tok.at("\"open\"")["text"], "user: Tell me a story.</s>\nassistant: Once upon a time");

  // The open prompt is the closed one without its last end of turn (</s>, id 2) and what follows,
  // and it ends with the message's own words (the text prompt's tokens after BOS).
  const std::vector<int> open = tokens_of(tok.at("\"open\"")),
                         closed = tokens_of(tok.at("\"closed\"")),
                         words = tokens_of(tok.at("\"words\""));
  ASSERT_GT(closed.size(), open.size());
  EXPECT_EQ(std::vector<int>(closed.begin(), closed.begin() + static_cast<long>(open.size())),
            open);
  EXPECT_EQ(closed[open.size()], 2);
  ASSERT_EQ(words.front(), 1);  // BOS
  const std::vector<int> message(words.begin() + 1, words.end());
  ASSERT_GT(open.size(), message.size());
  EXPECT_EQ(std::vector<int>(open.end() - static_cast<long>(message.size()), open.end()), message);

  // run: each variant's prompt_tokens are tokenize's, and the continued chat's answer is the
  // answer to a prompt of its token ids (stopped by the model's stop ids alike).
  write_lines(in,
              {chat("next", json::object()), chat("closed", {{"add_generation_prompt", false}}),
               chat("open", {{"add_generation_prompt", false}, {"continue_final_message", true}}),
               json{{"id", "open-ids"}, {"prompt", open}, {"max_tokens", 12}, {"temperature", 0}}});
  const CommandResult r = run_shell(binary() + " run --model " + model_ + " --chat-template " +
                                    tmpl + " --input " + in + " --output " + work_ + "/out.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = by_id(read_jsonl(work_ + "/out.jsonl"));
  for (const char* id : {"\"next\"", "\"closed\"", "\"open\""})
    EXPECT_EQ(out.at(id)["prompt_tokens"], tok.at(id)["tokens"].size()) << id;
  EXPECT_EQ(out.at("\"open\"")["text"], out.at("\"open-ids\"")["text"]);
  EXPECT_EQ(out.at("\"open\"")["finish_reason"], out.at("\"open-ids\"")["finish_reason"]);
  EXPECT_EQ(out.at("\"open\"")["completion_tokens"], out.at("\"open-ids\"")["completion_tokens"]);
  EXPECT_NE(out.at("\"open\"")["text"], "");
}

// The request fields refuse what cannot be continued, and the template's rendering is checked:
// each such request is its own error record, and the job's other requests are answered.
TEST_F(ChatOptionsCli, WhatCannotBeContinuedIsThatRequestsErrorRecord) {
  const std::string upper = work_ + "/upper.jinja", in = work_ + "/refused.jsonl";
  std::ofstream(upper) << "{% for m in messages %}{{ m['content'] | upper }}\n{% endfor %}";
  const json continued = {{"add_generation_prompt", false}, {"continue_final_message", true}};
  json user_last = chat("user-last", continued);
  user_last["messages"] = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  write_lines(in, {user_last, chat("both", {{"continue_final_message", true}}),
                   chat("rewritten", continued), chat("fine", json::object())});
  const CommandResult r = run_shell(binary() + " run --model " + model_ + " --chat-template " +
                                    upper + " --input " + in + " --output " + work_ + "/ref.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = by_id(read_jsonl(work_ + "/ref.jsonl"));
  EXPECT_EQ(out.at("\"user-last\"")["error"],
            "line 1: field 'continue_final_message' is true but the last message ('messages[0]') "
            "has role \"user\": only an assistant message can be continued");
  EXPECT_NE(out.at("\"both\"")["error"].get<std::string>().find("'add_generation_prompt' is not "
                                                                "given"),
            std::string::npos)
      << out.at("\"both\"");
  EXPECT_NE(out.at("\"rewritten\"")["error"].get<std::string>().find(
                "the last message's content does not appear in the rendered chat"),
            std::string::npos)
      << out.at("\"rewritten\"");
  EXPECT_NE(out.at("\"fine\"")["finish_reason"], "error") << out.at("\"fine\"");
}

}  // namespace
