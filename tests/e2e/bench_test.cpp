// `tpllama bench`: the report's counts follow from the workload in closed form, the phases add up,
// a multi-rank layout runs, and bad requests are refused with the offending values.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_util.h"

namespace tpllama {
namespace {

using cli_test::binary;
using cli_test::run_shell;
using nlohmann::json;
namespace fs = std::filesystem;

json read_json(const std::string& path) {
  json j;
  std::ifstream(path) >> j;
  return j;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("tpllama_bench_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(Bench, ReportCountsFollowFromTheWorkload) {
  const std::string path = temp_path("tiny.json");
  const auto r = run_shell(binary() + " bench --shape tiny --random-weights --prompts 6 --input-len 8:16 --output-len 5 "
                           "--max-seqs 3 --json " + path + " --no-limits");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tpllama bench: tiny (random weights)"), std::string::npos) << r.output;
  const json j = read_json(path);
  // EOS is ignored: every request generates exactly --output-len tokens.
  EXPECT_EQ(j["generated_tokens"].get<long long>(), 6 * 5);
  EXPECT_GE(j["prompt_tokens"].get<long long>(), 6 * 8);
  EXPECT_LE(j["prompt_tokens"].get<long long>(), 6 * 16);
  // The first token of each request comes from its prefill step, the other 4 from decode steps.
  EXPECT_EQ(j["decode_tokens_per_second"].get<double>() > 0, true);
  EXPECT_GE(j["decode_steps"].get<long long>(), 2 * 4);  // 6 sequences, at most 3 at a time
  EXPECT_LE(j["prefill_seconds"].get<double>() + j["decode_seconds"].get<double>(),
            j["elapsed_seconds"].get<double>() + 1e-6);
  // Decode reads every weight matrix once per step: tiny's matrices in f32, rows padded to 32-row
  // panels (dim 128, kv 64, gate/up 344 -> 352 rows, down 128 x 344, 4 layers, a 32000 x 128
  // head), plus the KV it attends.
  const double matrices = 4.0 * (128 * 128 * 2 + 64 * 128 * 2 + 352 * 128 * 2 + 128 * 344) * 4 + 32000.0 * 128 * 4;
  EXPECT_GT(j["decode_bytes_per_token"].get<double>(), matrices / 3);
  EXPECT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["weight_bytes"].get<double>(), matrices + 32000.0 * 128 * 4 + (2 * 4 + 1) * 128 * 4);
  fs::remove(path);
}

TEST(Bench, MeasuresTheMachineAndRunsTwoRanksOfTensorParallelism) {
  if (run_shell("which mpirun").exit_code != 0) GTEST_SKIP() << "mpirun not found on PATH";
  const std::string path = temp_path("tp2.json");
  const auto r = run_shell("mpirun -np 2 --oversubscribe " + binary() +
                           " bench --shape tiny --random-weights --vocab 512 --prompts 4 --input-len 16 --output-len 4 "
                           "--tp 2 --threads 1 --dtype bf16 --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = read_json(path);
  EXPECT_EQ(j["layout"]["tp"], 2);
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_EQ(j["generated_tokens"].get<long long>(), 16);
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_GT(j["ranks"][1]["collective_seconds"].get<double>(), 0);
  // The limits are measured, not assumed: positive and of a plausible order for a CPU.
  EXPECT_GT(j["machine"]["read_bandwidth_bytes_per_second"].get<double>(), 1e9);
  EXPECT_GT(j["machine"]["gemm_flops_per_second"].get<double>(), 1e9);
  EXPECT_GT(j["decode_bandwidth_fraction"].get<double>(), 0);
  EXPECT_GT(j["prefill_gemm_fraction"].get<double>(), 0);
  fs::remove(path);
}

TEST(Bench, BadRequestsAreRefusedWithTheValues) {
  auto r = run_shell(binary() + " bench --shape tiny --prompts 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--shape tiny has no weight files: add --random-weights"), std::string::npos) << r.output;
  r = run_shell(binary() + " bench --shape tiny --random-weights --input-len 900 --output-len 200 --no-limits");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--input-len 900 + --output-len 200 exceeds the model's context of 1024"), std::string::npos)
      << r.output;
  r = run_shell(binary() + " bench --shape tiny --random-weights --input-len 9:3 --no-limits");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--input-len '9:3'"), std::string::npos) << r.output;
  r = run_shell(binary() + " bench --shape nope --random-weights --no-limits");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown shape 'nope'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tpllama
