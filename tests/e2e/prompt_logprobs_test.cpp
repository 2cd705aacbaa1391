// Prompt log-probabilities end to end: vLLM's prompt_logprobs and OpenAI's echo over run.c's own
// logits (shipped with stories260K for "Once upon a time" and its greedy story), and against a
// scoring request over the same text, which they must agree with to 1e-5.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class PromptLogprobs : public StoriesSuite<PromptLogprobs> {
 public:
  static constexpr const char* kTag = "prompt_logprobs";

 protected:
  void SetUp() override {
    StoriesSuite<PromptLogprobs>::SetUp();
    std::ifstream refs(stories_ + "/reference_greedy.jsonl");
    std::string line;
    std::getline(refs, line);
    reference_ = json::parse(line);
    std::ifstream f(stories_ + "/logits_once_upon_a_time.f32", std::ios::binary);
    logits_.resize(64 * 512);
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(logits_.data()),
                       static_cast<std::streamsize>(logits_.size() * 4)));
    tokens_ = reference_["prompt_tokens"].get<std::vector<int>>();
    for (int t : reference_["generated_tokens"]) tokens_.push_back(t);
  }

  // run.c's log-softmax at position p (its row p predicts token p + 1) of token t, and its rank.
  double logprob(size_t p, int t) const {
    const float* row = logits_.data() + p * 512;
    double mx = row[0], sum = 0;
    for (int v = 0; v < 512; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (int v = 0; v < 512; ++v) sum += std::exp(row[v] - mx);
    return row[t] - mx - std::log(sum);
  }
  int rank(size_t p, int t) const {
    const float* row = logits_.data() + p * 512;
    return 1 + static_cast<int>(std::count_if(row, row + 512, [&](float x) { return x > row[t]; }));
  }
  // run.c's most likely token at position p after `skip` better ones.
  int best(size_t p, int skip) const {
    std::vector<int> order(512);
    for (int v = 0; v < 512; ++v) order[static_cast<size_t>(v)] = v;
    const float* row = logits_.data() + p * 512;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    return order[static_cast<size_t>(skip)];
  }

  json reference_;
  std::vector<float> logits_;
  std::vector<int> tokens_;  // the prompt's 5, then the 60 generated: run.c's 64 logit rows
};

// The whole story (run.c's tokens) as a prompt: each position's log-probability, rank and top 3 are
// run.c's, and the continuation's (prompt_logprobs' and echo's) equal a scoring request's to 1e-5;
// in one step, and chunked to 7 and to 1 token a step.
TEST_F(PromptLogprobs, AreRunCsAndAgreeWithAScoringRequest) {
  const std::string prompt = reference_["prompt"], output = reference_["output"];
  const std::vector<json> requests = {
      {{"id", "story"}, {"prompt", tokens_}, {"prompt_logprobs", 3}, {"max_tokens", 2}},
      {{"id", "score"},
       {"context", prompt},
       {"continuation", output.substr(prompt.size())},
       {"logprobs", true}},
      {{"id", "echo"}, {"prompt", tokens_}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 1}}};
  for (const std::string flags : {"", " --max-batch-tokens 7", " --max-batch-tokens 1"}) {
    SCOPED_TRACE("flags:" + flags);
    std::map<std::string, json> records = run_requests("story", requests, flags);
    const json& story = records["story"];
    ASSERT_EQ(story["prompt_tokens"], 65) << story.dump();
    const json& positions = story["prompt_logprobs"];
    ASSERT_EQ(positions.size(), 65u) << story.dump();
    EXPECT_TRUE(positions[0].is_null());
    for (size_t p = 0; p < 64; ++p) {
      const json& at = positions[p + 1];
      const int target = tokens_[p + 1];
      const json& mine = at.at(std::to_string(target));
      EXPECT_NEAR(mine["logprob"].get<double>(), logprob(p, target), 1e-4) << "position " << p;
      EXPECT_EQ(mine["rank"], rank(p, target)) << "position " << p;
      for (int j = 0; j < 3; ++j) {
        const int id = best(p, j);
        ASSERT_TRUE(at.contains(std::to_string(id))) << "position " << p << ": " << at.dump();
        EXPECT_EQ(at[std::to_string(id)]["rank"], j + 1);
        EXPECT_NEAR(at[std::to_string(id)]["logprob"].get<double>(), logprob(p, id), 1e-4);
      }
      EXPECT_LE(at.size(), 4u);
    }
    const json& scored = records["score"]["token_logprobs"];
    ASSERT_EQ(scored.size(), 60u);
    const json& echoed = records["echo"]["logprobs"]["token_logprobs"];
    ASSERT_EQ(echoed.size(), 66u) << "the prompt's 65 tokens and the one generated";
    for (size_t g = 0; g < 60; ++g) {
      EXPECT_NEAR(positions[5 + g].at(std::to_string(tokens_[5 + g]))["logprob"].get<double>(),
                  scored[g].get<double>(), 1e-5)
          << "token " << g;
      EXPECT_NEAR(echoed[5 + g].get<double>(), scored[g].get<double>(), 1e-5) << "token " << g;
    }
  }
}

// echo: the prompt's text before the completion's; with logprobs, the prompt's tokens first (the
// first null), then the completion's as the request without echo has them.
TEST_F(PromptLogprobs, EchoPrependsThePromptAndItsLogprobs) {
  const std::string prompt = reference_["prompt"];
  const json common = {{"prompt", prompt}, {"max_tokens", 10}, {"logprobs", 2}};
  json echo = common, plain = common;
  echo["id"] = "echo";
  echo["echo"] = true;
  plain["id"] = "plain";
  std::map<std::string, json> records = run_requests("echo", {echo, plain}, " --n 2 --max-seqs 4");
  for (int k = 0; k < 2; ++k) {
    const json& e = records["echo"]["choices"][k];
    const json& p = records["plain"]["choices"][k];
    EXPECT_EQ(e["text"], prompt + p["text"].get<std::string>());
    const json& lp = e["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 5u + 10u);
    EXPECT_EQ(lp["tokens"][0], "<s>");
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    for (size_t i = 1; i < 5; ++i) {
      EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), logprob(i - 1, tokens_[i]), 1e-4);
      EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    }
    for (size_t g = 0; g < 10; ++g) {
      EXPECT_EQ(lp["tokens"][5 + g], p["logprobs"]["tokens"][g]);
      EXPECT_NEAR(lp["token_logprobs"][5 + g].get<double>(),
                  p["logprobs"]["token_logprobs"][g].get<double>(), 1e-5);
    }
  }
}

TEST_F(PromptLogprobs, AreRefusedWhereTheyMeanNothing) {
  std::map<std::string, json> records = run_requests(
      "refused",
      {{{"id", "wide"}, {"prompt", "Hi"}, {"prompt_logprobs", 21}},
       {{"id", "score"}, {"context", "Hi"}, {"continuation", " there"}, {"prompt_logprobs", 1}},
       {{"id", "score_echo"}, {"context", "Hi"}, {"continuation", " there"}, {"echo", true}},
       {{"id", "ok"}, {"prompt", "Hi"}, {"prompt_logprobs", 0}, {"max_tokens", 1}}});
  EXPECT_NE(
      records["wide"].value("error", "").find("'prompt_logprobs' must be an integer in [0, 20]"),
      std::string::npos)
      << records["wide"].dump();
  EXPECT_NE(records["score"].value("error", "").find("field 'prompt_logprobs' is 1"),
            std::string::npos)
      << records["score"].dump();
  EXPECT_NE(records["score_echo"].value("error", "").find("field 'echo' is true"),
            std::string::npos)
      << records["score_echo"].dump();
  // k = 0: the prompt's own token at each position, with its rank, and no other.
  const json& ok = records["ok"]["prompt_logprobs"];
  ASSERT_GE(ok.size(), 2u) << records["ok"].dump();
  for (size_t p = 1; p < ok.size(); ++p) EXPECT_EQ(ok[p].size(), 1u) << ok.dump();
}

}  // namespace
