// The family fixtures of tests/data/families (Mistral, Qwen2, Qwen3 random models with llama.cpp's
// greedy ids, chosen-token log-probabilities and top-5, cross-checked by a float64 forward): the
// requests to run on one, and the check of a run's records against its reference.jsonl. Used by
// the CPU layouts (parallel/families_cli_test.cpp) and the GPU (gpu/e2e_gpu_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace tpllama::cli_test {

inline constexpr double kFamilyTolerance = 1e-4;  // the fixtures' float32 noise is about 1e-5

inline std::string family_dir(const std::string& family) {
  return std::string(TPLLAMA_TEST_DATA_DIR) + "/families/" + family;
}

// The fixture's prompts (token ids, 24 greedy tokens, logprobs 5, EOS ignored) into `path`, each
// naming its tokens by id (return_tokens_as_token_ids).
inline void write_family_input(const std::string& model, const std::string& path) {
  std::ofstream in(path);
  for (json p : read_jsonl(model + "/prompts.jsonl")) {
    p["return_tokens_as_token_ids"] = true;
    in << p.dump() << "\n";
  }
}

// The id of a token shown as "token_id:<id>".
inline int shown_id(const std::string& shown) {
  EXPECT_EQ(shown.rfind("token_id:", 0), 0u) << shown;
  return shown.rfind("token_id:", 0) == 0 ? std::stoi(shown.substr(9)) : -1;
}

// Every record of `output` against the fixture: greedy ids identical, and every chosen-token and
// shared top-5 log-probability within kFamilyTolerance of llama.cpp's.
inline void expect_family_reference(const std::string& model, const std::string& output,
                                    const std::string& what) {
  const std::vector<json> prompts = read_jsonl(model + "/prompts.jsonl");
  const std::vector<json> expected = read_jsonl(model + "/reference.jsonl");
  ASSERT_EQ(prompts.size(), expected.size());
  ASSERT_FALSE(prompts.empty());
  const std::map<std::string, json> got = by_id(read_jsonl(output));
  ASSERT_EQ(got.size(), prompts.size()) << what;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = prompts[i]["id"].dump();
    const json& want = expected[i];
    ASSERT_EQ(want["prompt_ids"], prompts[i]["prompt"]) << "fixture line " << i;
    ASSERT_TRUE(got.count(id)) << what << " " << id;
    const json& lp = got.at(id)["logprobs"];
    std::vector<int> ids;
    for (const json& t : lp["tokens"]) ids.push_back(shown_id(t.get<std::string>()));
    const auto greedy = want["greedy_ids"].get<std::vector<int>>();
    EXPECT_EQ(ids, greedy) << what << " " << id;
    if (ids != greedy) continue;
    double worst = 0;
    for (size_t s = 0; s < ids.size(); ++s) {
      worst = std::max(worst, std::abs(lp["token_logprobs"][s].get<double>() -
                                       want["logprobs"][s].get<double>()));
      std::map<int, double> mine;  // this step's top entries, by id
      for (const auto& [shown, value] : lp["top_logprobs"][s].items())
        mine[shown_id(shown)] = value.get<double>();
      int shared = 0;
      for (const json& pair : want["top5"][s]) {
        auto it = mine.find(pair[0].get<int>());
        if (it == mine.end()) continue;
        ++shared;
        worst = std::max(worst, std::abs(it->second - pair[1].get<double>()));
      }
      EXPECT_GE(shared, 4) << what << " " << id << " step " << s;
    }
    EXPECT_LE(worst, kFamilyTolerance) << what << " " << id;
  }
}

}  // namespace tpllama::cli_test
