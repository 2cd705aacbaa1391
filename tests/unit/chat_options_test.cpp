// apply_chat_template's options beyond add_generation_prompt, in ChatTemplate: every line of
// tests/data/chat/chat_options.jsonl (continue_final_message and documents over real templates,
// written by scripts/oracles/render_chat_templates.py with Jinja2 and transformers' procedure)
// rendered and compared byte for byte, then the procedure's cases one by one on small templates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "test_util.h"

namespace tpllama {
namespace {

using nlohmann::ordered_json;

const std::filesystem::path kChatData = testing_util::kTestData / "chat";
using testing_util::read_whole_file;

std::vector<ordered_json> option_lines() {
  std::ifstream in(kChatData / "chat_options.jsonl");
  std::vector<ordered_json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(ordered_json::parse(line));
  return lines;
}

// The line's inputs through the ChatTemplate call ModelText makes for such a request.
std::string render_line(const ordered_json& r) {
  static std::map<std::string, ChatTemplate> cache;
  const std::string name = r["template"].get<std::string>();
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, ChatTemplate(read_whole_file(kChatData / "templates" / name), name))
             .first;
  ChatTemplate candidate = it->second;
  candidate.set_clock_for_tests(r["clock"].get<std::time_t>());
  ordered_json extra = r["extra"];
  if (!r["documents"].is_null()) extra["documents"] = r["documents"];
  // A null token (Qwen's bos_token) is undefined in Jinja2; "" prints the same.
  const std::string bos = r["bos_token"].is_null() ? "" : r["bos_token"].get<std::string>(),
                    eos = r["eos_token"].get<std::string>();
  if (r["continue_final_message"].get<bool>())
    return candidate.render_continuing(r["messages"], bos, eos, extra);
  return candidate.render(r["messages"], r["add_generation_prompt"].get<bool>(), bos, eos, extra);
}

TEST(ChatOptions, EveryTemplateRendersTheOptionsAsTransformersDoes) {
  const auto lines = option_lines();
  ASSERT_GE(lines.size(), 8u * 12) << "chat_options.jsonl is missing or short";
  int continued = 0, refused = 0;
  for (const auto& r : lines) {
    const std::string what = r["template"].get<std::string>() + " x " +
                             r["conversation"].get<std::string>() +
                             (r["continue_final_message"].get<bool>() ? " continued" : "");
    std::string candidate;
    std::string error;
    try {
      candidate = render_line(r);
    } catch (const ChatTemplateError& e) {
      error = e.what();
    }
    if (r.contains("expected")) {
      EXPECT_EQ(error, "") << what;
      EXPECT_EQ(candidate, r["expected"].get<std::string>()) << what;
      continued += r["continue_final_message"].get<bool>() ? 1 : 0;
    } else {
      EXPECT_NE(error, "") << what << ": rendered, but the reference raised " << r["error"].dump();
      ++refused;
    }
  }
  // Both ways of the procedure ran: continuations, and a message a template rewrites (R1 Distill
  // drops the reasoning before </think>).
  EXPECT_GE(continued, 8 * 8);
  EXPECT_GE(refused, 1);
}

const ordered_json kStory = ordered_json::parse(
    R"([{"role": "user", "content": "Tell me a story."}, {"role": "assistant", "content": "Once upon"}])");

// Every turn closed by </turn>, as most templates close theirs.
constexpr const char* kTurns =
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</turn>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

TEST(ChatOptions, ContinuingCutsTheEndOfTurnAndNoGenerationPromptIsAdded) {
  const ChatTemplate t(kTurns, "t");
  EXPECT_EQ(t.render(kStory, false, "", ""),
            "<user>Tell me a story.</turn><assistant>Once upon</turn>");
  EXPECT_EQ(t.render_continuing(kStory, "", ""),
            "<user>Tell me a story.</turn><assistant>Once upon");
}

TEST(ChatOptions, TrailingWhitespaceStaysWhenTheTemplateKeepsIt) {
  ordered_json spaced = kStory;
  spaced[1]["content"] = "Once upon ";
  EXPECT_EQ(ChatTemplate(kTurns, "t").render_continuing(spaced, "", ""),
            "<user>Tell me a story.</turn><assistant>Once upon ");
  // A template that trims the content is cut after the trimmed text.
  const ChatTemplate trims(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</turn>"
      "{% endfor %}",
      "t");
  EXPECT_EQ(trims.render_continuing(spaced, "", ""),
            "<user>Tell me a story.</turn><assistant>Once upon");
  // Leading whitespace takes transformers' second way, even where the template kept it all.
  spaced[1]["content"] = "\n Once upon\xC2\xA0";  // U+00A0 is whitespace to Python
  EXPECT_EQ(ChatTemplate(kTurns, "t").render_continuing(spaced, "", ""),
            "<user>Tell me a story.</turn><assistant>\n Once upon");
}

TEST(ChatOptions, TheLastOccurrenceOfTheContentIsTheMessages) {
  const auto messages = ordered_json::parse(
      R"([{"role": "user", "content": "Say yes, yes."}, {"role": "assistant", "content": "yes"}])");
  EXPECT_EQ(ChatTemplate(kTurns, "t").render_continuing(messages, "", ""),
            "<user>Say yes, yes.</turn><assistant>yes");
}

TEST(ChatOptions, AMessageTheTemplateRewritesCannotBeContinued) {
  const ChatTemplate shouts("{% for m in messages %}{{ m.content | upper }}|{% endfor %}",
                            "model/chat_template.jinja");
  try {
    shouts.render_continuing(kStory, "", "");
    FAIL() << "no exception";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(),
                 "model/chat_template.jinja: continue_final_message: the last message's content "
                 "does not appear in the rendered chat (the template changes it), so it cannot be "
                 "continued");
  }
}

TEST(ChatOptions, ALastMessageWithoutTextCannotBeContinued) {
  ordered_json silent = kStory;
  silent[1]["content"] = nullptr;
  EXPECT_THROW(ChatTemplate(kTurns, "t").render_continuing(silent, "", ""), ChatTemplateError);
  silent[1].erase("content");
  EXPECT_THROW(ChatTemplate(kTurns, "t").render_continuing(silent, "", ""), ChatTemplateError);
  EXPECT_THROW(ChatTemplate(kTurns, "t").render_continuing(ordered_json::array(), "", ""),
               ChatTemplateError);
}

TEST(ChatOptions, DocumentsReachTheTemplate) {
  const ChatTemplate rag(
      "{% if documents %}{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}"
      "{% else %}none{% endif %}",
      "t");
  EXPECT_EQ(rag.render(kStory, true, "", ""), "none");
  const auto extra = ordered_json::parse(
      R"({"documents": [{"title": "Llamas", "text": "camelids"}, {"title": "Alpacas", "text": "smaller"}]})");
  EXPECT_EQ(rag.render(kStory, true, "", "", extra), "[Llamas: camelids][Alpacas: smaller]");
}

}  // namespace
}  // namespace tpllama
