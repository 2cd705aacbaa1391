// vLLM's truncate_prompt_tokens end to end on stories260K: a truncated prompt is the prompt of its
// last k tokens given as token ids (its text, its prompt logprobs, its echo), a truncated scoring
// request scores what the same kept tokens' prompt_logprobs give, and what cannot be truncated
// (k past the context, a scoring request left without context) is that request's error record.
#include <cmath>
#include <tuple>

#include <gtest/gtest.h>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class TruncatePrompt : public StoriesSuite<TruncatePrompt> {
 public:
  static constexpr const char* kTag = "truncate_prompt";

 protected:
  void SetUp() override {
    StoriesSuite<TruncatePrompt>::SetUp();
    std::ifstream refs(stories_ + "/reference_greedy.jsonl");
    std::string line;
    std::getline(refs, line);
    const json reference = json::parse(line);
    story_ = reference["prompt_tokens"].get<std::vector<int>>();
    for (int t : reference["generated_tokens"]) story_.push_back(t);
  }

  // The tokens `tpllama tokenize` gives a text prompt.
  std::vector<int> tokenize(const std::string& text) {
    const std::string in = work_ + "/tok_in.jsonl", out = work_ + "/tok_out.jsonl";
    std::ofstream(in) << json{{"prompt", text}}.dump() << "\n";
    const CommandResult r = run_shell(binary() + " tokenize --model " + model_ + " --input " + in +
                                      " --output " + out + " --overwrite");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> records = read_jsonl(out);
    return records.empty() ? std::vector<int>{} : records[0]["tokens"].get<std::vector<int>>();
  }

  std::vector<int> story_;  // run.c's greedy story: its 5-token prompt and 60 generated tokens
};

std::vector<int> last(const std::vector<int>& v, size_t k) {
  return {v.end() - static_cast<std::ptrdiff_t>(k), v.end()};
}

TEST_F(TruncatePrompt, KeepsThePromptsLastTokensAsIfTheyWereThePrompt) {
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She liked to "
      "play with her ball in the park near her house.";
  const std::vector<int> text_tokens = tokenize(text);
  ASSERT_GT(text_tokens.size(), 12u);
  const json common = {{"max_tokens", 16}, {"prompt_logprobs", 1}, {"logprobs", 1}};
  json ids = common, ids_kept = common, words = common, words_kept = common, all = common;
  ids["prompt"] = story_;
  ids["truncate_prompt_tokens"] = 20;
  ids_kept["prompt"] = last(story_, 20);
  words["prompt"] = text;
  words["truncate_prompt_tokens"] = 9;
  words_kept["prompt"] = last(text_tokens, 9);
  all["prompt"] = story_;
  all["truncate_prompt_tokens"] = 200;  // more than it has: the prompt as it is
  ids["id"] = "ids";
  ids_kept["id"] = "ids_kept";
  words["id"] = "words";
  words_kept["id"] = "words_kept";
  all["id"] = "all";
  std::map<std::string, json> r =
      run_requests("kept", {ids, ids_kept, words, words_kept, all}, " --max-model-len 256");
  for (const auto& [truncated, kept, n] :
       {std::tuple{"ids", "ids_kept", 20}, std::tuple{"words", "words_kept", 9}}) {
    const json &a = r[truncated], &b = r[kept];
    ASSERT_EQ(a.value("error", ""), "") << a.dump();
    EXPECT_EQ(a["prompt_tokens"], n);
    EXPECT_EQ(a["text"], b["text"]);
    EXPECT_EQ(a["completion_tokens"], b["completion_tokens"]);
    EXPECT_EQ(a["logprobs"]["tokens"], b["logprobs"]["tokens"]);
    ASSERT_EQ(a["prompt_logprobs"].size(), static_cast<size_t>(n));
    for (size_t p = 1; p < a["prompt_logprobs"].size(); ++p)
      for (const auto& [token, entry] : a["prompt_logprobs"][p].items())
        EXPECT_NEAR(entry["logprob"].get<double>(),
                    b["prompt_logprobs"][p][token]["logprob"].get<double>(), 1e-5)
            << truncated << " position " << p;
  }
  EXPECT_EQ(r["all"]["prompt_tokens"], static_cast<int>(story_.size()));
}

TEST_F(TruncatePrompt, EchoWritesTheKeptPromptsText) {
  const std::string text = "The little dog ran to the big tree and sat down under it.";
  const std::vector<int> tokens = tokenize(text);
  ASSERT_GT(tokens.size(), 6u);
  std::map<std::string, json> r = run_requests(
      "echo", {{{"id", "echo"},
                {"prompt", text},
                {"truncate_prompt_tokens", 6},
                {"echo", true},
                {"max_tokens", 4}},
               {{"id", "kept"}, {"prompt", last(tokens, 6)}, {"echo", true}, {"max_tokens", 4}}});
  ASSERT_EQ(r["echo"].value("error", ""), "") << r["echo"].dump();
  EXPECT_EQ(r["echo"]["text"], r["kept"]["text"]) << "the model saw only the last 6 tokens";
  EXPECT_LT(r["echo"]["text"].get<std::string>().size(), text.size() + 1);
}

// A scoring request's truncated context: its score is the sum, over the continuation's tokens, of
// the prompt_logprobs a prompt of the same kept tokens gets.
TEST_F(TruncatePrompt, AScoringRequestScoresWhatTheKeptTokensPredict) {
  const std::string context = "Once upon a time, there was a little girl named Lily. She";
  const std::string continuation = " liked to play";
  const std::vector<int> whole = tokenize(context + continuation);
  const std::vector<int> alone = tokenize(context);
  const size_t n_continuation = whole.size() - alone.size();
  ASSERT_GT(n_continuation, 0u);
  const size_t keep = n_continuation + 4;
  std::map<std::string, json> r = run_requests(
      "score",
      {{{"id", "score"},
        {"context", context},
        {"continuation", continuation},
        {"truncate_prompt_tokens", keep}},
       {{"id", "prompt"}, {"prompt", last(whole, keep)}, {"prompt_logprobs", 0}, {"max_tokens", 1}},
       {{"id", "too_short"},
        {"context", context},
        {"continuation", continuation},
        {"truncate_prompt_tokens", n_continuation}},
       {{"id", "too_long"}, {"prompt", "Hi"}, {"truncate_prompt_tokens", 300}}},
      " --max-model-len 256");
  ASSERT_EQ(r["score"].value("error", ""), "") << r["score"].dump();
  EXPECT_EQ(r["score"]["n_tokens"], static_cast<int>(n_continuation));
  double sum = 0;
  const json& rows = r["prompt"]["prompt_logprobs"];
  for (size_t p = keep - n_continuation; p < keep; ++p)
    sum += rows[p].begin().value()["logprob"].get<double>();
  EXPECT_NEAR(r["score"]["logprob"].get<double>(), sum, 1e-4);
  EXPECT_NE(r["too_short"].value("error", "").find("leaves no context"), std::string::npos)
      << r["too_short"].dump();
  EXPECT_NE(r["too_long"]
                .value("error", "")
                .find("field 'truncate_prompt_tokens' is 300, more than the context of 256 tokens"),
            std::string::npos)
      << r["too_long"].dump();
}

}  // namespace
