// Penalties, logit_bias, min_tokens and vLLM's stop options end to end, against closed forms over
// the independent fp64 reference forward: each greedy step's logits from the reference, edited as
// OpenAI and vLLM define the field, give the token and the log-probabilities the record must hold.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "cli_util.h"
#include "llama_reference.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

// The tokens so far (prompt and generated) and the step's logits, edited in place.
using Edit = std::function<void(const std::vector<int>& prompt, const std::vector<int>& generated,
                                std::vector<double>& logits)>;

struct Step {
  int token = 0;
  double logprob = 0;
  std::vector<double> top;  // the best log-probabilities, descending
};

class Penalties : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ConvertedStories c = ConvertedStories::make("penalties");
    stories_ = c.stories;
    if (stories_.empty()) return;
    work_ = c.work;
    model_ = c.model;
    weights_ = reference::load_llama2c(stories_ + "/stories260K.bin", &config_);
    std::ifstream refs(stories_ + "/reference_greedy.jsonl");
    std::string line;
    std::getline(refs, line);
    reference_ = json::parse(line);
  }
  static void TearDownTestSuite() {
    if (!work_.empty()) fs::remove_all(work_);
  }
  void SetUp() override {
    if (stories_.empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing;
  }

  static std::vector<int> prompt() { return reference_["prompt_tokens"].get<std::vector<int>>(); }

  // Greedy steps of the reference forward with `edit` applied to each step's logits, until
  // max_tokens or a stop id (1, 2: the model's EOS ids) once min_tokens are generated.
  static std::vector<Step> reference_steps(const Edit& edit, int max_tokens, int top_n) {
    std::vector<int> tokens = prompt(), generated;
    std::vector<Step> steps;
    for (int g = 0; g < max_tokens; ++g) {
      std::vector<double> row =
          reference::forward_all(config_, weights_, tokens, reference::RopeLayout::kInterleaved)
              .back();
      edit(prompt(), generated, row);
      const double mx = *std::max_element(row.begin(), row.end());
      double sum = 0;
      for (double x : row) sum += std::exp(x - mx);
      Step s;
      s.token = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      s.logprob = row[static_cast<size_t>(s.token)] - mx - std::log(sum);
      std::vector<double> sorted = row;
      std::sort(sorted.rbegin(), sorted.rend());
      for (int j = 0; j < top_n; ++j)
        s.top.push_back(sorted[static_cast<size_t>(j)] - mx - std::log(sum));
      steps.push_back(s);
      tokens.push_back(s.token);
      generated.push_back(s.token);
      if (s.token == 1 || s.token == 2) break;
    }
    return steps;
  }

  // One greedy request over the reference prompt's ids with `fields`; its record.
  static json run_one(const std::string& name, const json& fields, int max_tokens,
                      int logprobs = 5) {
    json request = {{"id", name},
                    {"prompt", prompt()},
                    {"max_tokens", max_tokens},
                    {"temperature", 0},
                    {"logprobs", logprobs}};
    request.update(fields);
    const std::string in = work_ + "/" + name + ".jsonl", out = work_ + "/" + name + "_out.jsonl";
    std::ofstream(in) << request.dump() << "\n";
    const CommandResult r = run_shell(binary() + " run --model " + model_ + " --input " + in +
                                      " --output " + out + " --log-interval 0");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> records = read_jsonl(out);
    EXPECT_EQ(records.size(), 1u) << r.output;
    return records.empty() ? json() : records[0];
  }

  // The record holds the reference's steps: as many tokens, each one's log-probability and the
  // best alternatives' (a different token would show as a different log-probability).
  static void expect_steps(const json& record, const std::vector<Step>& steps) {
    ASSERT_EQ(record.value("completion_tokens", -1), static_cast<int>(steps.size()))
        << record.dump();
    const json& lp = record["logprobs"];
    for (size_t g = 0; g < steps.size(); ++g) {
      EXPECT_NEAR(lp["token_logprobs"][g].get<double>(), steps[g].logprob, 2e-4) << "step " << g;
      std::vector<double> top;
      for (const auto& [text, value] : lp["top_logprobs"][g].items())
        top.push_back(value.get<double>());
      std::sort(top.rbegin(), top.rend());
      ASSERT_EQ(top.size(), steps[g].top.size()) << "step " << g;
      for (size_t j = 0; j < top.size(); ++j)
        EXPECT_NEAR(top[j], steps[g].top[j], 2e-4) << "step " << g << " alternative " << j;
    }
  }

  static inline std::string stories_, work_, model_;
  static inline reference::Config config_;
  static inline reference::Weights weights_;
  static inline json reference_;
};

TEST_F(Penalties, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfSeenTokens) {
  const double rp = 2.0;
  const auto edit = [&](const std::vector<int>& p, const std::vector<int>& g,
                        std::vector<double>& x) {
    std::set<int> seen(p.begin(), p.end());
    seen.insert(g.begin(), g.end());
    for (int t : seen) {
      double& v = x[static_cast<size_t>(t)];
      v = v > 0 ? v / rp : v * rp;
    }
  };
  const std::vector<Step> steps = reference_steps(edit, 32, 5);
  const json rec = run_one("repetition", {{"repetition_penalty", rp}}, 32);
  expect_steps(rec, steps);
  // The penalty changes the text: the reference's unpenalized greedy tokens differ somewhere.
  const std::vector<int> plain = reference_["generated_tokens"].get<std::vector<int>>();
  bool differs = false;
  for (size_t g = 0; g < steps.size(); ++g) differs |= steps[g].token != plain[g];
  EXPECT_TRUE(differs) << "the case must exercise the penalty";
}

TEST_F(Penalties, FrequencyAndPresencePenaltiesSubtractPerGeneratedOccurrence) {
  const double fp = 0.6, pp = 0.4;
  const auto edit = [&](const std::vector<int>&, const std::vector<int>& g,
                        std::vector<double>& x) {
    std::map<int, int> count;
    for (int t : g) ++count[t];
    for (const auto& [t, c] : count) x[static_cast<size_t>(t)] -= fp * c + pp;
  };
  expect_steps(run_one("frequency", {{"frequency_penalty", fp}, {"presence_penalty", pp}}, 24),
               reference_steps(edit, 24, 5));
}

TEST_F(Penalties, LogitBiasIsAddedAndMinusOneHundredBansPlusOneHundredForces) {
  const int first = reference_["generated_tokens"][0].get<int>();
  const auto ban = [&](const std::vector<int>&, const std::vector<int>&, std::vector<double>& x) {
    x[static_cast<size_t>(first)] -= 100;
    x[300] += 3.5;
  };
  const std::vector<Step> banned = reference_steps(ban, 16, 5);
  const json rec =
      run_one("bias", {{"logit_bias", {{std::to_string(first), -100}, {"300", 3.5}}}}, 16);
  expect_steps(rec, banned);
  for (const Step& s : banned) EXPECT_NE(s.token, first);

  const auto force = [](const std::vector<int>&, const std::vector<int>&, std::vector<double>& x) {
    x[300] += 100;
  };
  const std::vector<Step> forced = reference_steps(force, 8, 2);
  const json all = run_one("force", {{"logit_bias", {{"300", 100}}}}, 8, 2);
  expect_steps(all, forced);
  for (const Step& s : forced) EXPECT_EQ(s.token, 300);
  // Eight times the same token: the text is one piece repeated.
  const std::string text = all["text"];
  ASSERT_FALSE(text.empty());
  const std::string piece = text.substr(0, text.size() / 8);
  std::string repeated;
  for (int i = 0; i < 8; ++i) repeated += piece;
  EXPECT_EQ(text, repeated);
}

TEST_F(Penalties, MinTokensHoldsBackAnEosTheModelPrefers) {
  // A bias makes EOS (id 2) the greedy choice at every step; min_tokens bans both stop ids until
  // six tokens are out, and the seventh is EOS.
  const auto edit = [](const std::vector<int>&, const std::vector<int>& g, std::vector<double>& x) {
    x[2] += 100;
    if (g.size() < 6) x[1] = x[2] = -INFINITY;
  };
  const std::vector<Step> steps = reference_steps(edit, 20, 3);
  ASSERT_EQ(steps.size(), 7u);
  ASSERT_EQ(steps.back().token, 2);
  const json rec = run_one("min_tokens", {{"logit_bias", {{"2", 100}}}, {"min_tokens", 6}}, 20, 3);
  expect_steps(rec, steps);
  EXPECT_EQ(rec["finish_reason"], "stop");
  EXPECT_FALSE(rec.contains("stop_reason")) << "EOS has no stop_reason, as in vLLM";
  // Without min_tokens the first token is EOS: nothing is generated but it.
  const json eager = run_one("no_min_tokens", {{"logit_bias", {{"2", 100}}}}, 20, 3);
  EXPECT_EQ(eager["completion_tokens"], 1);
  EXPECT_EQ(eager["text"], "");
}

TEST_F(Penalties, NeutralValuesChangeNothing) {
  json plain = run_one("plain", json::object(), 30);
  json neutral = run_one("neutral",
                         {{"presence_penalty", 0},
                          {"frequency_penalty", 0.0},
                          {"repetition_penalty", 1},
                          {"logit_bias", json::object()},
                          {"min_tokens", 0},
                          {"stop_token_ids", json::array()},
                          {"skip_special_tokens", true},
                          {"spaces_between_special_tokens", true},
                          {"include_stop_str_in_output", false}},
                         30);
  plain.erase("id");
  neutral.erase("id");
  EXPECT_EQ(plain.dump(), neutral.dump());
}

TEST_F(Penalties, StopTokenIdsEndTheTextBeforeTheirTokenUnlessIncluded) {
  // The first reference token that has not occurred before it.
  const std::vector<int> plain = reference_["generated_tokens"].get<std::vector<int>>();
  size_t k = 3;
  while (std::find(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(k), plain[k]) !=
         plain.begin() + static_cast<std::ptrdiff_t>(k))
    ++k;
  const int stop = plain[k];
  const json excluded = run_one("stop_ids", {{"stop_token_ids", {stop}}}, 40, 0);
  EXPECT_EQ(excluded["completion_tokens"], static_cast<int>(k) + 1) << excluded.dump();
  EXPECT_EQ(excluded["finish_reason"], "stop");
  EXPECT_EQ(excluded["stop_reason"], stop);
  const json included = run_one(
      "stop_ids_in", {{"stop_token_ids", {stop}}, {"include_stop_str_in_output", true}}, 40, 0);
  const std::string short_text = excluded["text"], long_text = included["text"];
  EXPECT_GT(long_text.size(), short_text.size());
  EXPECT_EQ(long_text.rfind(short_text, 0), 0u) << long_text;
  // The reference's text up to and with the stop token, as the record's logprobs spell it.
  const std::string whole = reference_["output"];
  EXPECT_NE(whole.find(long_text), std::string::npos) << long_text;

  // A stop string: cut before it, or kept with include_stop_str_in_output.
  const json cut = run_one("stop_str", {{"stop", "girl"}}, 40, 0);
  const json kept =
      run_one("stop_str_in", {{"stop", "girl"}, {"include_stop_str_in_output", true}}, 40, 0);
  EXPECT_EQ(cut["stop_reason"], "girl");
  EXPECT_EQ(kept["text"].get<std::string>(), cut["text"].get<std::string>() + "girl");
}

TEST_F(Penalties, SkipSpecialTokensFalseWritesTheEndOfTextPiece) {
  // EOS forced after two tokens: its piece is text only when special tokens are kept and the stop
  // token is included.
  const json base = {{"logit_bias", {{"2", 100}}}, {"min_tokens", 2}};
  json keep = base;
  keep["skip_special_tokens"] = false;
  keep["include_stop_str_in_output"] = true;
  json skip = base;
  skip["include_stop_str_in_output"] = true;
  const json kept = run_one("special_kept", keep, 10, 0);
  const json skipped = run_one("special_skipped", skip, 10, 0);
  const json plain = run_one("special_plain", base, 10, 0);
  EXPECT_EQ(kept["completion_tokens"], 3);
  EXPECT_EQ(kept["text"].get<std::string>(), plain["text"].get<std::string>() + "</s>");
  EXPECT_EQ(skipped["text"], plain["text"]);
}

TEST_F(Penalties, BadValuesAreErrorRecordsNamingTheField) {
  const std::string in = work_ + "/bad.jsonl", out = work_ + "/bad_out.jsonl";
  std::ofstream f(in);
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"logit_bias", {{"512", 1}}}}, "token id 512 (a key of logit_bias) is outside"},
      {{{"logit_bias", {{"abc", 1}}}}, "keys must be token ids"},
      {{{"logit_bias", {{"5", 101}}}}, "must be a number in [-100, 100]"},
      {{{"logit_bias", {{"5", 1}, {"05", 2}}}}, "names token 5 twice"},
      {{{"stop_token_ids", {3, 600}}}, "token id 600 (element 1 of stop_token_ids) is outside"},
      {{{"presence_penalty", 2.5}}, "'presence_penalty' must be a number in [-2, 2]"},
      {{{"repetition_penalty", 0}}, "'repetition_penalty' must be a number > 0"},
      {{{"min_tokens", 50}, {"max_tokens", 10}}, "more than max_tokens 10"},
      {{{"skip_special_tokens", "no"}}, "'skip_special_tokens' must be true or false"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json request = {{"id", i}, {"prompt", "Once upon a time"}, {"max_tokens", 4}};
    request.update(cases[i].first);
    f << request.dump() << "\n";
  }
  // A scoring request takes no penalty: refused by name, at any value but the neutral one.
  f << json({{"id", "score"},
             {"context", "Once"},
             {"continuation", " upon"},
             {"presence_penalty", 1}})
           .dump()
    << "\n"
    << json({{"id", "score_neutral"},
             {"context", "Once"},
             {"continuation", " upon"},
             {"presence_penalty", 0}})
           .dump()
    << "\n";
  f.close();
  const CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::map<std::string, json> records = by_id(read_jsonl(out));
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& rec = records.at(json(i).dump());
    EXPECT_EQ(rec["finish_reason"], "error") << rec.dump();
    EXPECT_NE(rec.value("error", "").find(cases[i].second), std::string::npos) << rec.dump();
  }
  const json& score = records.at(json("score").dump());
  EXPECT_NE(score.value("error", "").find("field 'presence_penalty' is 1"), std::string::npos)
      << score.dump();
  EXPECT_FALSE(records.at(json("score_neutral").dump()).contains("error"));
}

}  // namespace
