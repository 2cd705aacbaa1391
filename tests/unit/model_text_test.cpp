// ModelText over a model directory with the shipped stories260K SentencePiece tokenizer: BOS from
// tokenizer_config.json, stop ids from config.json, generation_config.json and the chat template's
// end of turn, chat prompts whose special-token text becomes ids, and where the template comes
// from. SentencePiece's own encoder is the oracle for the text between special tokens.
#include "model/model_text.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shipped_models.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Llama 2 chat's shape: BOS as text, turns in [INST], the answer closed by eos_token.
constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} "
    "[/INST]"
    "{% else %} {{ m['content'] }} {{ eos_token }}{% endif %}{% endfor %}";

class ModelTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string stories = shipped::stories_dir();
    if (stories.empty()) GTEST_FAIL() << shipped::kStoriesMissing;
    dir_ = (fs::path(testing::TempDir()) / ("model_text_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(stories + "/tok512.model", dir_ + "/tokenizer.model");
    ASSERT_TRUE(sp_.Load(dir_ + "/tokenizer.model").ok());
    config_.vocab_size = 512;
    config_.bos_token_id = 1;
    config_.eos_token_ids = {2};
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const json& j) {
    std::ofstream(dir_ + "/" + name) << j.dump();
  }
  std::vector<int> sp(const std::string& text) const {
    std::vector<int> ids;
    EXPECT_TRUE(sp_.Encode(text, &ids).ok());
    return ids;
  }
  static Request chat(const json& messages) {
    Request r;
    r.messages = nlohmann::ordered_json(messages);
    return r;
  }
  static Request prompt(const std::string& text) {
    Request r;
    r.prompt = text;
    return r;
  }

  std::string dir_;
  LlamaConfig config_;
  sentencepiece::SentencePieceProcessor sp_;
};

TEST_F(ModelTextTest, BosIsPrependedUnlessTokenizerConfigTurnsItOff) {
  int n_context = 0;
  {
    ModelText text(dir_, config_);
    std::vector<int> expected = {1};
    for (int id : sp("Once upon a time")) expected.push_back(id);
    const std::vector<int32_t> got = text.encode(prompt("Once upon a time"), &n_context);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), expected);
  }
  write("tokenizer_config.json", {{"add_bos_token", false}});
  ModelText text(dir_, config_);
  const std::vector<int32_t> got = text.encode(prompt("Once upon a time"), &n_context);
  EXPECT_EQ(std::vector<int>(got.begin(), got.end()), sp("Once upon a time"));
}

TEST_F(ModelTextTest, StopIdsJoinConfigGenerationConfigAndTheEndOfTurn) {
  write("tokenizer_config.json",
        {{"chat_template", kTemplate}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  write("generation_config.json", {{"eos_token_id", json::array({2, 7})}});
  config_.eos_token_ids = {5};
  ModelText text(dir_, config_);
  EXPECT_EQ(text.stop_ids(), (std::vector<int>{5, 2, 7}));  // </s> = 2 ends the template's turns
  EXPECT_EQ(text.stop_ids_origin(),
            "config.json 5; generation_config.json 2, 7; the chat template's end of turn 2");
}

TEST_F(ModelTextTest, AChatPromptsSpecialTokenTextBecomesItsIdAndNoBosIsAdded) {
  write("tokenizer_config.json",
        {{"chat_template", kTemplate}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ModelText text(dir_, config_);
  const Request r = chat(json::array({{{"role", "user"}, {"content", "Hi"}},
                                      {{"role", "assistant"}, {"content", "Yo"}},
                                      {{"role", "user"}, {"content", "Bye"}}}));
  EXPECT_EQ(text.render_chat(r), "<s>[INST] Hi [/INST] Yo </s>[INST] Bye [/INST]");
  std::vector<int> expected = {1};
  for (int id : sp("[INST] Hi [/INST] Yo ")) expected.push_back(id);
  expected.push_back(2);
  for (int id : sp("[INST] Bye [/INST]")) expected.push_back(id);
  int n_context = 0;
  const std::vector<int32_t> got = text.encode(r, &n_context);
  EXPECT_EQ(std::vector<int>(got.begin(), got.end()), expected);
}

// The request's add_generation_prompt reaches the template; continue_final_message leaves the last
// assistant message open: its end of turn (</s>, id 2) is gone from the text and the tokens.
TEST_F(ModelTextTest, ARequestsGenerationPromptOptionsShapeItsPrompt) {
  write("tokenizer_config.json",
        {{"chat_template", std::string(kTemplate) + "{% if add_generation_prompt %}[NEXT]"
                                                    "{% endif %}"},
         {"bos_token", "<s>"},
         {"eos_token", "</s>"}});
  ModelText text(dir_, config_);
  Request r = chat(json::array(
      {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Once upon"}}}));
  EXPECT_EQ(text.render_chat(r), "<s>[INST] Hi [/INST] Once upon </s>[NEXT]");
  r.add_generation_prompt = false;
  EXPECT_EQ(text.render_chat(r), "<s>[INST] Hi [/INST] Once upon </s>");
  r.continue_final_message = true;
  EXPECT_EQ(text.render_chat(r), "<s>[INST] Hi [/INST] Once upon");
  std::vector<int> expected = {1};
  for (int id : sp("[INST] Hi [/INST] Once upon")) expected.push_back(id);
  int n_context = 0;
  const std::vector<int32_t> got = text.encode(r, &n_context);
  EXPECT_EQ(std::vector<int>(got.begin(), got.end()), expected);
  EXPECT_EQ(text.stop_ids(), (std::vector<int>{2}));  // the model's stop ids, as for any request
}

TEST_F(ModelTextTest, AContinuationTheTemplateCannotShowIsThatRequestsPromptError) {
  std::ofstream(dir_ + "/upper.jinja")
      << "{% for m in messages %}{{ m.content | upper }}{% endfor %}";
  ModelText text(dir_, config_, dir_ + "/upper.jinja");
  Request r = chat(json::array(
      {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Once upon"}}}));
  r.add_generation_prompt = false;
  r.continue_final_message = true;
  int n_context = 0;
  try {
    text.encode(r, &n_context);
    FAIL() << "no PromptError";
  } catch (const PromptError& e) {
    EXPECT_NE(std::string(e.what()).find("does not appear in the rendered chat"), std::string::npos)
        << e.what();
  }
}

TEST_F(ModelTextTest, TemplateSourcesInHuggingFacesOrder) {
  // A list of named templates: "default" is the one.
  write("tokenizer_config.json",
        {{"chat_template", json::array({{{"name", "tool_use"}, {"template", "TOOLS"}},
                                        {{"name", "default"}, {"template", "DEFAULT"}}})}});
  const Request r = chat(json::array({{{"role", "user"}, {"content", "Hi"}}}));
  EXPECT_EQ(ModelText(dir_, config_).render_chat(r), "DEFAULT");
  // chat_template.jinja beside it wins, and --chat-template over both.
  std::ofstream(dir_ + "/chat_template.jinja") << "FILE";
  EXPECT_EQ(ModelText(dir_, config_).render_chat(r), "FILE");
  std::ofstream(dir_ + "/mine.jinja") << "MINE";
  ModelText mine(dir_, config_, dir_ + "/mine.jinja");
  EXPECT_EQ(mine.render_chat(r), "MINE");
  EXPECT_EQ(mine.chat_template_source(), dir_ + "/mine.jinja");
}

TEST_F(ModelTextTest, WithoutATemplateAChatRequestIsRefusedAlone) {
  ModelText text(dir_, config_);
  EXPECT_FALSE(text.has_chat_template());
  int n_context = 0;
  try {
    text.encode(chat(json::array({{{"role", "user"}, {"content", "Hi"}}})), &n_context);
    FAIL() << "no PromptError";
  } catch (const PromptError& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
}

TEST_F(ModelTextTest, BadFilesAreNamed) {
  EXPECT_THROW(
      {
        try {
          ModelText(dir_, config_, dir_ + "/missing.jinja");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(dir_ + "/missing.jinja"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  write("generation_config.json", {{"eos_token_id", 900}});
  try {
    ModelText text(dir_, config_);
    FAIL() << "an eos_token_id beyond the vocabulary was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eos_token_id 900 is outside the vocabulary [0, 512)"),
              std::string::npos)
        << e.what();
  }
  fs::remove(dir_ + "/tokenizer.model");
  try {
    ModelText text(dir_, config_);
    FAIL() << "a directory without a tokenizer was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither tokenizer.model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpllama
