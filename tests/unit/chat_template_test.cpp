// ChatTemplate against Jinja2: every line of tests/data/chat/renderings.jsonl (written by
// scripts/oracles/render_chat_templates.py, never by this code) rendered and compared byte for
// byte.
#include "chat/chat_template.h"
#include "test_util.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace tpllama {
namespace {

const std::filesystem::path kChatData = testing_util::kTestData / "chat";
using testing_util::read_whole_file;

std::vector<nlohmann::ordered_json> renderings() {
  std::ifstream in(kChatData / "renderings.jsonl");
  std::vector<nlohmann::ordered_json> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::ordered_json::parse(line));
  return lines;
}

const ChatTemplate& template_named(const std::string& name) {
  static std::map<std::string, ChatTemplate> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const std::filesystem::path path = kChatData / "templates" / name;
    it = cache.emplace(name, ChatTemplate(read_whole_file(path), path.string())).first;
  }
  return it->second;
}

struct Outcome {
  std::string text;
  std::string error;
  bool threw = false;
};

// A token the checkpoint leaves null (Qwen's bos_token) is undefined in Jinja2; tpllama passes "",
// which prints the same.
std::string token_or_empty(const nlohmann::ordered_json& token) {
  return token.is_null() ? std::string() : token.get<std::string>();
}

Outcome render_line(const nlohmann::ordered_json& r) {
  ChatTemplate candidate = template_named(r["template"].get<std::string>());
  candidate.set_clock_for_tests(r["clock"].get<std::time_t>());
  Outcome out;
  try {
    out.text = candidate.render(r["messages"], r["add_generation_prompt"].get<bool>(),
                                token_or_empty(r["bos_token"]), token_or_empty(r["eos_token"]),
                                r["extra"]);
  } catch (const ChatTemplateError& e) {
    out.threw = true;
    out.error = e.what();
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(ChatTemplate, EveryTemplateRendersEveryConversationAsJinja2Does) {
  const auto lines = renderings();
  ASSERT_GE(lines.size(), 8u * 12 * 2) << "renderings.jsonl is missing or short";
  int compared = 0;
  for (const auto& r : lines) {
    const std::string what = r["template"].get<std::string>() + " x " +
                             r["conversation"].get<std::string>() +
                             (r["add_generation_prompt"].get<bool>() ? " +gen" : "");
    const Outcome candidate = render_line(r);
    if (r.contains("expected")) {
      EXPECT_FALSE(candidate.threw) << what << ": threw " << candidate.error;
      EXPECT_EQ(candidate.text, r["expected"].get<std::string>()) << what;
    } else {
      const auto& reference = r["error"];
      EXPECT_TRUE(candidate.threw) << what << ": rendered, but Jinja2 raised " << reference.dump();
      // The template's own raise_exception message comes through word for word.
      if (reference["raised_by_template"].get<bool>()) {
        EXPECT_TRUE(ends_with(candidate.error, ": " + reference["message"].get<std::string>()))
            << what << ": got " << candidate.error;
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(lines.size()));
}

TEST(ChatTemplate, RaiseExceptionNamesTheSource) {
  const ChatTemplate t("{{ raise_exception('roles must alternate') }}",
                       "model/tokenizer_config.json");
  try {
    t.render(nlohmann::ordered_json::array(), false, "<s>", "</s>");
    FAIL() << "no exception";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(), "model/tokenizer_config.json: roles must alternate");
  }
}

TEST(ChatTemplate, RenderErrorNamesSourceAndLine) {
  const ChatTemplate t("line one\n{{ messages[0].content.missing.deeper }}", "t.jinja");
  auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  try {
    t.render(messages, false, "", "");
    FAIL() << "no exception";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(),
                 "t.jinja: chat template line 2: 'str object' has no attribute 'missing'");
  }
}

TEST(ChatTemplate, UnsupportedConstructIsRefusedAtLoadWithSourceAndLine) {
  try {
    ChatTemplate("{{ bos_token }}\n\n{% include 'other.jinja' %}",
                 "tokenizer_config.json chat_template");
    FAIL() << "no exception";
  } catch (const ChatTemplateError&) {
    FAIL() << "a load error is a plain tpllama::Error, not a render error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "tokenizer_config.json chat_template: chat template line 3: unsupported tag 'include'");
  }
}

TEST(ChatTemplate, ExtraVariablesReachTheTemplateAndToolsDefaultToNone) {
  const ChatTemplate t(
      "{{ date_string }}|{{ tools is none }}|{{ documents is none }}|{{ custom.a }}", "t");
  const auto extra =
      nlohmann::ordered_json::parse(R"({"date_string": "1 Jan 2025", "custom": {"a": [1, 2]}})");
  EXPECT_EQ(t.render(nlohmann::ordered_json::array(), false, "", "", extra),
            "1 Jan 2025|True|True|[1, 2]");
  const ChatTemplate given("{{ tools is none }}|{{ tools | length }}", "t");
  EXPECT_EQ(given.render(nlohmann::ordered_json::array(), false, "", "",
                         nlohmann::ordered_json::parse(R"({"tools": []})")),
            "False|0");
}

TEST(ChatTemplate, MalformedRequestsAreRenderErrors) {
  const ChatTemplate t("{{ messages }}", "t");
  EXPECT_THROW(t.render(nlohmann::ordered_json::array(), false, "", "",
                        nlohmann::ordered_json::parse(R"({"messages": []})")),
               ChatTemplateError);
  EXPECT_THROW(t.render(nlohmann::ordered_json::object(), false, "", ""), ChatTemplateError);
}

TEST(ChatTemplate, StrftimeNowUsesTheTestClockInUtc) {
  ChatTemplate t("{{ strftime_now('%d %b %Y %H:%M') }}", "t");
  t.set_clock_for_tests(1738584000);  // 2025-02-03 12:00:00 UTC
  EXPECT_EQ(t.render(nlohmann::ordered_json::array(), false, "", ""), "03 Feb 2025 12:00");
}

TEST(ChatTemplate, StrftimeNowWithoutTestClockIsToday) {
  const ChatTemplate t("{{ strftime_now('%Y') }}", "t");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  EXPECT_EQ(t.render(nlohmann::ordered_json::array(), false, "", ""),
            std::to_string(1900 + local.tm_year));
}

TEST(ChatTemplate, CopiesShareTheParsedTemplate) {
  const ChatTemplate original("{{ bos_token }}{{ messages | length }}", "t");
  const ChatTemplate copy = original;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.render(nlohmann::ordered_json::parse("[1, 2]"), false, "<s>", ""), "<s>2");
}

TEST(ChatTemplate, RendersAFewMessagesWellUnderAMillisecond) {
  const ChatTemplate t(
      read_whole_file(kChatData / "templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), "llama31");
  const auto messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "How are you?"}])");
  constexpr int kRenders = 200;
  const auto start = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (int i = 0; i < kRenders; ++i)
    bytes += t.render(messages, true, "<|begin_of_text|>", "<|eot_id|>").size();
  const double per_render_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      kRenders;
  EXPECT_GT(bytes, 0u);
  EXPECT_LT(per_render_ms, 1.0) << "one render took " << per_render_ms << " ms";
}

TEST(ChatTemplateFromConfig, TakesAStringField) {
  const auto config = nlohmann::json::parse(R"({"chat_template": "{{ x }}", "bos_token": "<s>"})");
  EXPECT_EQ(chat_template_from_config(config, "c.json"), "{{ x }}");
}

TEST(ChatTemplateFromConfig, AbsentOrNullIsNone) {
  EXPECT_EQ(chat_template_from_config(nlohmann::json::parse(R"({"bos_token": "<s>"})"), "c.json"),
            std::nullopt);
  EXPECT_EQ(
      chat_template_from_config(nlohmann::json::parse(R"({"chat_template": null})"), "c.json"),
      std::nullopt);
}

TEST(ChatTemplateFromConfig, PicksDefaultFromAList) {
  const auto config = nlohmann::json::parse(
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(chat_template_from_config(config, "c.json"), "D");
}

// transformers raises for a list without "default" ("multiple chat templates with no default
// specified"); so does this, naming the templates it has.
TEST(ChatTemplateFromConfig, RefusesAListWithoutADefault) {
  const auto config = nlohmann::json::parse(
      R"({"chat_template": [{"name": "rag", "template": "R"}, {"name": "tool_use", "template": "T"}]})");
  try {
    chat_template_from_config(config, "model/tokenizer_config.json");
    ADD_FAILURE() << "a list without a default was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part :
         {"model/tokenizer_config.json", "\"default\"", "\"rag\"", "\"tool_use\""})
      EXPECT_NE(what.find(part), std::string::npos) << part << " missing from: " << what;
  }
}

TEST(ChatTemplateFromConfig, RefusesMalformedFields) {
  const char* malformed[] = {R"({"chat_template": 3})", R"({"chat_template": []})",
                             R"({"chat_template": [{"name": "default"}]})",
                             R"({"chat_template": ["x"]})", R"([1])"};
  for (const char* text : malformed) {
    try {
      chat_template_from_config(nlohmann::json::parse(text), "model/tokenizer_config.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model/tokenizer_config.json"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tpllama

namespace tpllama {
namespace {

// A 1000-turn conversation of 200-byte messages with 10 tools: longer than real chats get.
nlohmann::ordered_json long_conversation() {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int i = 0; i < 1000; ++i) {
    const std::string content = "Turn " + std::to_string(i) + ": " + std::string(190, 'a' + i % 26);
    messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", content}});
  }
  return messages;
}

nlohmann::ordered_json ten_tools() {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (int i = 0; i < 10; ++i) {
    tools.push_back(nlohmann::ordered_json::parse(
        R"({"type": "function", "function": {"name": "tool_)" + std::to_string(i) +
        R"(", "description": "Looks something up.", "parameters": {"type": "object", "properties":
        {"query": {"type": "string", "description": "What to look up"}}, "required": ["query"]}}})"));
  }
  return tools;
}

// The least budget (steps, or bytes) with which `t` renders, by bisection: renders fail past it.
template <typename Set>
std::int64_t least_budget(ChatTemplate& t, const nlohmann::ordered_json& messages,
                          const nlohmann::ordered_json& extra, std::int64_t high, Set set) {
  std::int64_t low = 0;  // fails at low, renders at high
  while (high - low > 1) {
    const std::int64_t mid = low + (high - low) / 2;
    set(mid);
    try {
      t.render(messages, true, "<s>", "</s>", extra);
      high = mid;
    } catch (const ChatTemplateError&) {
      low = mid;
    }
  }
  return high;
}

// The render budget is generous for real templates: each shipped one (and those in the
// workspace's shared/chat_templates, when present) renders a 1000-turn conversation with tools
// within a hundredth of it. The measured needs are printed for src/README.md.
TEST(ChatTemplate, RealTemplatesRenderLongConversationsInAHundredthOfTheBudget) {
  const jinja::RenderLimits defaults;
  const auto messages = long_conversation();
  const nlohmann::ordered_json extra = {{"tools", ten_tools()}};
  int measured = 0;
  const std::filesystem::path shared = kChatData / "../../../../shared/chat_templates";
  for (const auto& dir : {kChatData / "templates", shared}) {
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".jinja") continue;
      ChatTemplate t(read_whole_file(entry.path()), entry.path().filename().string());
      jinja::RenderLimits limits = defaults;
      const std::int64_t steps =
          least_budget(t, messages, extra, defaults.max_steps, [&](std::int64_t n) {
            limits.max_steps = n;
            t.set_render_limits(limits);
          });
      limits = defaults;
      const auto max_bytes = static_cast<std::int64_t>(defaults.max_bytes);
      const std::int64_t bytes = least_budget(t, messages, extra, max_bytes, [&](std::int64_t n) {
        limits.max_bytes = static_cast<size_t>(n);
        t.set_render_limits(limits);
      });
      std::cout << entry.path().filename().string() << ": " << steps << " steps, " << bytes
                << " bytes\n";
      EXPECT_LE(steps, defaults.max_steps / 100) << entry.path();
      EXPECT_LE(bytes, max_bytes / 100) << entry.path();
      ++measured;
    }
  }
  EXPECT_GE(measured, 8);
}

}  // namespace
}  // namespace tpllama
