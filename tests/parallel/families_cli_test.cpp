// Mistral, Qwen2 and Qwen3 under every layout against engines outside the project: the random
// models of tests/data/families (copied from the shared oracles) with the greedy ids, chosen-token
// log-probabilities and top-5 that llama.cpp computed on them, cross-checked by a float64 forward.
// Each fixture fails an engine that drops its family's difference (its README's negative
// controls: the window ignored or one too wide, the biases dropped, the q/k norms skipped or after
// RoPE).
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../e2e/cli_util.h"
#include "../e2e/family_oracle.h"
#include "shipped_models.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;
namespace fs = std::filesystem;

struct FamilyLayout {
  std::string family;
  int tp;
  int pp;
};

void PrintTo(const FamilyLayout& f, std::ostream* os) {
  *os << f.family << " tp " << f.tp << " pp " << f.pp;
}

class FamilyOracle : public ::testing::TestWithParam<FamilyLayout> {};

TEST_P(FamilyOracle, GreedyIdsAndLogprobsMatchLlamaCpp) {
  const FamilyLayout f = GetParam();
  const std::string model = family_dir(f.family);
  const fs::path work =
      fs::path(::testing::TempDir()) /
      ("families_" + f.family + "_" + std::to_string(f.tp) + "x" + std::to_string(f.pp));
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string input = (work / "in.jsonl").string(), output = (work / "out.jsonl").string();
  write_family_input(model, input);
  const int ranks = f.tp * f.pp;
  const std::string launcher =
      ranks > 1 ? "mpirun -np " + std::to_string(ranks) + " --oversubscribe " : "";
  const CommandResult r =
      run_shell(launcher + binary() + " run --model " + model + " --input " + input + " --output " +
                output + " --tp " + std::to_string(f.tp) + " --pp " + std::to_string(f.pp) +
                " --max-model-len 128 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_family_reference(model, output,
                          f.family + " tp " + std::to_string(f.tp) + " pp " + std::to_string(f.pp));
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyOracle, ::testing::ValuesIn([] {
                           std::vector<FamilyLayout> all;
                           for (const char* family : {"mistral", "qwen2", "qwen3"})
                             for (const auto& [tp, pp] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 2}})
                               all.push_back({family, tp, pp});
                           return all;
                         }()),
                         [](const auto& info) {
                           return info.param.family + "_tp" + std::to_string(info.param.tp) +
                                  "_pp" + std::to_string(info.param.pp);
                         });

}  // namespace

namespace {

// Each family's random-weight shape through the tools around a run: `convert --from random` in f32
// and int8, `shard` for tp 2 x pp 2 (pp 2 for int8), and the output of each sharded run under
// mpirun byte for byte that of its checkpoint on one rank.
class FamilyTools : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTools, RandomShardedAndInt8CheckpointsRunLikeOneRank) {
  const std::string shape = GetParam();
  const fs::path work = fs::path(::testing::TempDir()) / ("family_tools_" + shape);
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string stories = tpllama::shipped::stories_dir();
  if (stories.empty()) GTEST_SKIP() << tpllama::shipped::kStoriesMissing;
  const std::string w = work.string(), tokenizer = stories + "/tok512.model";
  auto ok = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0;
  };
  for (const char* dtype : {"f32", "int8"})
    ASSERT_TRUE(
        ok(run_shell(binary() + " convert --from random --shape " + shape + " --tokenizer " +
                     tokenizer + " --dtype " + dtype + " --out " + w + "/" + dtype)));
  {
    std::ofstream in(w + "/in.txt");
    in << "Once upon a time\nThe little dog ran to the park and\nShe said\n";
  }
  const std::string flags = " --input " + w + "/in.txt --max-model-len 128 --max-tokens 40";
  ASSERT_TRUE(
      ok(run_shell(binary() + " run --model " + w + "/f32 --output " + w + "/one.jsonl" + flags)));
  ASSERT_TRUE(ok(
      run_shell(binary() + " shard --model " + w + "/f32 --tp 2 --pp 2 --out " + w + "/shards")));
  ASSERT_TRUE(ok(run_shell("mpirun -np 4 --oversubscribe " + binary() + " run --model " + w +
                           "/shards --tp 2 --pp 2 --output " + w + "/sharded.jsonl" + flags)));
  EXPECT_EQ(read_jsonl(w + "/sharded.jsonl"), read_jsonl(w + "/one.jsonl"));

  ASSERT_TRUE(ok(run_shell(binary() + " run --model " + w + "/int8 --dtype int8 --output " + w +
                           "/int8_one.jsonl" + flags)));
  // The tiny shapes' widths are not whole int8 groups per TP rank: the int8 shards split layers.
  ASSERT_TRUE(ok(run_shell(binary() + " shard --model " + w + "/int8 --tp 1 --pp 2 --out " + w +
                           "/int8_shards")));
  ASSERT_TRUE(
      ok(run_shell("mpirun -np 2 --oversubscribe " + binary() + " run --model " + w +
                   "/int8_shards --dtype int8 --pp 2 --output " + w + "/int8_pp2.jsonl" + flags)));
  const auto int8_one = read_jsonl(w + "/int8_one.jsonl");
  EXPECT_EQ(read_jsonl(w + "/int8_pp2.jsonl"), int8_one);
  ASSERT_EQ(int8_one.size(), 3u);
  EXPECT_EQ(int8_one[0]["completion_tokens"], 40);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FamilyTools,
                         ::testing::Values("mistral-tiny", "qwen2-tiny", "qwen3-tiny"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
