// Requests of n samples end to end on stories260K: sample k of a request is the request of n = 1
// whose seed is sample k's (splitmix64 of the seed and k, as documented), computed here on the
// plain path of a prompt of its own; greedy samples are run.c's greedy text; the prompt is
// computed once; and n is refused where it cannot be served.
#include <gtest/gtest.h>

#include "cli_util.h"
#include "core/random.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class Samples : public StoriesSuite<Samples> {
 public:
  static constexpr const char* kTag = "samples";

 protected:
  // The seed a request of n = 1 is given to draw sample k of a request seeded `seed`.
  static uint64_t seed_of_sample(uint64_t seed, uint64_t k) {
    return k == 0 ? seed : tpllama::splitmix64(seed ^ (k * tpllama::kSplitmix64Gamma));
  }
};

// Block sizes that put the prompt's end inside a block (copy on write of the shared block) and
// at a block's end (no copy), with and without the prefix cache, chunked, and with preemptions.
TEST_F(Samples, EachSampleIsTheSingleRequestOfItsSeed) {
  const uint64_t seed = 4242;
  const int n = 5;
  std::vector<json> requests = {{{"id", "n"},
                                 {"prompt", "Once upon a time, there was a"},
                                 {"n", n},
                                 {"seed", seed},
                                 {"temperature", 1.0},
                                 {"max_tokens", 48},
                                 {"logprobs", 2}}};
  for (int k = 0; k < n; ++k)
    requests.push_back({{"id", "single" + std::to_string(k)},
                        {"prompt", "Once upon a time, there was a"},
                        {"seed", seed_of_sample(seed, static_cast<uint64_t>(k))},
                        {"temperature", 1.0},
                        {"max_tokens", 48},
                        {"logprobs", 2}});
  for (const std::string& flags :
       std::vector<std::string>{"", " --kv-block-size 4", " --kv-block-size 3 --prefix-caching off",
                                " --max-seqs 5 --max-batch-tokens 8",
                                " --kv-cache-memory 700KB --stats " + work_ + "/each_stats.json"}) {
    SCOPED_TRACE("flags:" + flags);
    std::map<std::string, json> records = run_requests("each", requests, flags);
    ASSERT_EQ(records.size(), static_cast<size_t>(n + 1));
    const json& joined = records["n"];
    ASSERT_TRUE(joined.contains("choices")) << joined.dump();
    ASSERT_EQ(joined["choices"].size(), static_cast<size_t>(n));
    EXPECT_FALSE(joined.contains("text")) << "the texts are the choices'";
    int completion = 0;
    std::set<std::string> texts;
    for (int k = 0; k < n; ++k) {
      const json& choice = joined["choices"][k];
      const json& single = records["single" + std::to_string(k)];
      EXPECT_EQ(choice["index"], k);
      EXPECT_EQ(choice["text"], single["text"]) << "sample " << k;
      EXPECT_EQ(choice["completion_tokens"], single["completion_tokens"]);
      EXPECT_EQ(choice["finish_reason"], single["finish_reason"]);
      EXPECT_EQ(choice["logprobs"]["tokens"], single["logprobs"]["tokens"]);
      const json& a = choice["logprobs"]["token_logprobs"];
      const json& b = single["logprobs"]["token_logprobs"];
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(a[i].get<double>(), b[i].get<double>(), 1e-5) << "sample " << k << " " << i;
      completion += choice["completion_tokens"].get<int>();
      texts.insert(choice["text"].get<std::string>());
      EXPECT_EQ(joined["prompt_tokens"], single["prompt_tokens"]) << "the prompt counted once";
    }
    EXPECT_EQ(joined["completion_tokens"], completion);
    EXPECT_EQ(texts.size(), static_cast<size_t>(n)) << "five draws of 48 tokens differ";
  }
  std::ifstream f(work_ + "/each_stats.json");
  EXPECT_GT(json::parse(f)["preemptions"].get<int>(), 0)
      << "34 blocks of 16 for 10 sequences of 56 positions: samples are preempted and recompute";
}

// Greedy samples are all the greedy text: run.c's, shipped with the model.
TEST_F(Samples, GreedySamplesAreEachRunCsText) {
  std::ifstream refs(stories_ + "/reference_greedy.jsonl");
  std::string line;
  std::getline(refs, line);
  const json reference = json::parse(line);
  const std::vector<int> generated = reference["generated_tokens"];
  const std::map<std::string, json> records =
      run_requests("greedy",
                   {{{"id", 0},
                     {"prompt", reference["prompt_tokens"]},
                     {"n", 3},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"max_tokens", static_cast<int>(generated.size())}}},
                   " --kv-block-size 5");
  const json& r = records.at("0");
  ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
  const std::string output = reference["output"], prompt = reference["prompt"];
  ASSERT_EQ(output.rfind(prompt, 0), 0u) << "run.c's output starts with the prompt";
  for (const json& choice : r["choices"]) {
    EXPECT_EQ(choice["text"], output.substr(prompt.size()));
    EXPECT_EQ(choice["completion_tokens"], static_cast<int>(generated.size()));
  }
}

// Eight samples of each of four prompts: the prompts are computed once each, and every sample's
// tokens are counted.
TEST_F(Samples, ThePromptIsComputedOnce) {
  std::vector<json> requests;
  const char* prompts[] = {"The little dog", "She said", "Once upon a time", "A big red ball"};
  for (int i = 0; i < 4; ++i)
    requests.push_back({{"id", i},
                        {"prompt", prompts[i]},
                        {"n", 8},
                        {"temperature", 0.9},
                        {"max_tokens", 16},
                        {"ignore_eos", true}});
  const std::string stats = work_ + "/once_stats.json";
  const std::map<std::string, json> records =
      run_requests("once", requests, " --max-seqs 16 --prefix-caching off --stats " + stats);
  ASSERT_EQ(records.size(), 4u);
  int prompt_tokens = 0;
  for (const auto& [id, r] : records) {
    prompt_tokens += r["prompt_tokens"].get<int>();
    EXPECT_EQ(r["completion_tokens"], 8 * 16);
  }
  std::ifstream f(stats);
  const json s = json::parse(f);
  EXPECT_EQ(s["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(s["prompt_tokens_computed"], prompt_tokens) << "not eight prefills of each";
  EXPECT_EQ(s["generated_tokens"], 4 * 8 * 16);
  EXPECT_EQ(s["requests"], 4);
}

TEST_F(Samples, NIsRefusedWhereItCannotBeServed) {
  std::map<std::string, json> records =
      run_requests("refused",
                   {{{"id", "wide"}, {"prompt", "Hi"}, {"n", 9}},
                    {{"id", "best_of"}, {"prompt", "Hi"}, {"best_of", 3}},
                    {{"id", "zero"}, {"prompt", "Hi"}, {"n", 0}},
                    {{"id", "score"}, {"context", "Hi"}, {"continuation", " there"}, {"n", 2}},
                    {{"id", "fits"}, {"prompt", "Hi"}, {"n", 8}, {"max_tokens", 2}}},
                   " --max-seqs 8");
  const auto error_of = [&](const char* id) { return records[id].value("error", std::string()); };
  EXPECT_NE(error_of("wide").find("n is 9 but --max-seqs is 8"), std::string::npos)
      << error_of("wide");
  EXPECT_NE(error_of("best_of").find("ask for samples with 'n'"), std::string::npos)
      << error_of("best_of");
  EXPECT_NE(error_of("zero").find("'n' must be an integer from 1 to 128"), std::string::npos)
      << error_of("zero");
  EXPECT_NE(error_of("score").find("field 'n' is 2: a scoring request"), std::string::npos)
      << error_of("score");
  EXPECT_EQ(records["fits"]["choices"].size(), 8u) << records["fits"].dump();
  // --n is every request's default, and must fit in --max-seqs.
  const CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + work_ +
                "/refused.jsonl --output " + work_ + "/never.jsonl --n 9 --max-seqs 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--n 9 is more than --max-seqs 8"), std::string::npos) << r.output;
}

// An OpenAI batch line of n: one response with n choices, and usage counting the prompt once.
TEST_F(Samples, ABatchResponseHasNChoices) {
  const std::string in = work_ + "/batch.jsonl", out = work_ + "/batch_out.jsonl";
  std::ofstream(in) << json({{"custom_id", "a"},
                             {"method", "POST"},
                             {"url", "/v1/completions"},
                             {"body",
                              {{"prompt", "The little dog"},
                               {"n", 3},
                               {"max_tokens", 6},
                               {"ignore_eos", true},
                               {"temperature", 1},
                               {"seed", 9}}}})
                           .dump()
                    << "\n"
                    << json({{"custom_id", "c"},
                             {"method", "POST"},
                             {"url", "/v1/chat/completions"},
                             {"body",
                              {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                               {"n", 2},
                               {"max_tokens", 4},
                               {"ignore_eos", true}}}})
                           .dump()
                    << "\n";
  const std::string chat_template = work_ + "/plain.jinja";
  std::ofstream(chat_template) << "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  const CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + out +
                " --log-interval 0 --chat-template " + chat_template);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, json> records;
  for (const json& rec : read_jsonl(out)) records[rec["custom_id"]] = rec;
  const json& a = records["a"]["response"]["body"];
  ASSERT_EQ(a["choices"].size(), 3u) << a.dump();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(a["choices"][k]["index"], k);
  EXPECT_EQ(a["usage"]["completion_tokens"], 18);
  EXPECT_EQ(a["usage"]["total_tokens"],
            a["usage"]["prompt_tokens"].get<int>() + a["usage"]["completion_tokens"].get<int>());
  const json& c = records["c"]["response"]["body"];
  ASSERT_EQ(c["choices"].size(), 2u) << records["c"].dump();
  EXPECT_EQ(c["choices"][1]["message"]["role"], "assistant");
  EXPECT_EQ(c["usage"]["completion_tokens"], 8);
}

}  // namespace
