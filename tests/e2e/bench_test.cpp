// `tpllama bench`: the report's counts follow from the workload in closed form, the phases add up,
// a multi-rank layout runs, and bad requests are refused with the offending values.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <thread>

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
  return (fs::temp_directory_path() / ("tpllama_bench_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(Bench, ReportCountsFollowFromTheWorkload) {
  const std::string path = temp_path("tiny.json");
  const auto r =
      run_shell(binary() +
                " bench --shape tiny --random-weights --prompts 6 --input-len 8:16 --output-len 5 "
                "--max-seqs 3 --json " +
                path + " --no-limits --log-interval 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tpllama bench: tiny (random weights)"), std::string::npos) << r.output;
  // Progress out of the workload's total (every update at --log-interval 0).
  EXPECT_NE(r.output.find("progress: 3/6 (50.0%) requests"), std::string::npos) << r.output;
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
  const double matrices =
      4.0 * (128 * 128 * 2 + 64 * 128 * 2 + 352 * 128 * 2 + 128 * 344) * 4 + 32000.0 * 128 * 4;
  EXPECT_GT(j["decode_bytes_per_token"].get<double>(), matrices / 3);
  EXPECT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["weight_bytes"].get<double>(),
            matrices + 32000.0 * 128 * 4 + (2 * 4 + 1) * 128 * 4);
  // --no-limits: no machine figures and no fractions of them, rather than zeros.
  EXPECT_TRUE(j["machine"].is_null()) << j["machine"];
  for (const char* k :
       {"decode_bandwidth_fraction", "decode_roofline_tokens_per_second", "prefill_gemm_fraction"})
    EXPECT_TRUE(j[k].is_null()) << k << " " << j[k];
  EXPECT_NE(r.output.find("not measured (--no-limits)"), std::string::npos) << r.output;
  // The workload as drawn: lengths within their ranges, the seed that drew them.
  const json& w = j["workload"];
  EXPECT_EQ(w["input_len_min"], 8);
  EXPECT_EQ(w["input_len_max"], 16);
  EXPECT_DOUBLE_EQ(w["mean_input_len"].get<double>(), j["prompt_tokens"].get<double>() / 6);
  EXPECT_DOUBLE_EQ(w["mean_output_len"].get<double>(), 5);
  EXPECT_EQ(w["seed"], 0);
  EXPECT_EQ(j["requests"], 6);
  EXPECT_NEAR(j["requests_per_second"].get<double>(), 6 / j["elapsed_seconds"].get<double>(), 1e-9);
  // Every request arrives at the start: from there, its first token comes no sooner than from its
  // admission, and its end no later than the run's. Six requests, three at a time: the second three
  // wait for the first.
  const json &admitted = j["ttft_seconds"], &started = j["ttft_from_start_seconds"],
             &e2e = j["latency_from_start_seconds"];
  for (const char* p : {"p50", "p90", "p99"}) {
    EXPECT_GE(started[p].get<double>(), admitted[p].get<double>()) << p;
    EXPECT_LE(e2e[p].get<double>(), j["elapsed_seconds"].get<double>() * 1.01 + 1e-6) << p;
  }
  EXPECT_EQ(started["count"], 6);
  EXPECT_EQ(e2e["count"], 6);
  // A late request's first token follows an early request's whole run (4 decode steps past its
  // first token), so the slowest from the start is past the slowest from admission.
  EXPECT_GT(started["p99"].get<double>(), admitted["p99"].get<double>());
  fs::remove(path);
}

TEST(Bench, MeasuresTheMachineAndRunsTwoRanksOfTensorParallelism) {
  if (run_shell("which mpirun").exit_code != 0)
    GTEST_FAIL() << "mpirun not found on PATH: the tests need Open MPI (openmpi-bin, which "
                    "scripts/setup.sh installs)";
  const std::string path = temp_path("tp2.json");
  const auto r = run_shell(
      "mpirun -np 2 --oversubscribe " + binary() +
      " bench --shape tiny --random-weights --vocab 512 --prompts 4 --input-len 16 --output-len 4 "
      "--tp 2 --threads 1 --dtype bf16 --json " +
      path);
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
  // Both ranks share one node: its first rank measured it, once.
  EXPECT_EQ(j["machine"]["devices"], 1);
  EXPECT_EQ(j["machine"]["measured_on"],
            std::to_string(std::thread::hardware_concurrency()) + " cores of 1 node");
  fs::remove(path);
}

// --op-split: every op of rank 0's forward timed within its passes, and the FLOPs of its matrix
// products in closed form from the shape (tiny: 4 layers, dim 128, 4 kv heads of 16, hidden 344,
// vocabulary 32 000), the ops' rates times their seconds.
TEST(Bench, OpSplitTimesTheOpsAndCountsTheirProducts) {
  const std::string path = temp_path("split.json");
  const auto r = run_shell(binary() +
                           " bench --shape tiny --random-weights --prompts 4 --input-len 8 "
                           "--output-len 6 --max-seqs 4 --op-split --no-limits --json " +
                           path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("op split, decode steps (rank 0)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GEMMs together"), std::string::npos) << r.output;
  const json j = read_json(path);
  const json& split = j["op_split"];
  EXPECT_GE(split["prefill"]["forwards"].get<long long>(), 1);
  EXPECT_EQ(split["decode"]["forwards"], j["decode_steps"]);
  std::map<std::string, double> decode_flops;  // the decode steps' FLOPs of each product
  for (const char* phase : {"prefill", "decode"}) {
    const json& s = split[phase];
    double timed = 0, gemm_seconds = 0, gemm_flops = 0;
    for (const json& e : s["ops"]) {
      timed += e["seconds"].get<double>();
      const std::string op = e["op"];
      EXPECT_EQ(op.rfind("GEMM ", 0) == 0, !e["flops_per_second"].is_null()) << op;
      if (e["flops_per_second"].is_null()) continue;
      const double flops = e["flops_per_second"].get<double>() * e["seconds"].get<double>();
      gemm_seconds += e["seconds"].get<double>();
      gemm_flops += flops;
      if (std::string(phase) == "decode") decode_flops[op] = flops;
    }
    EXPECT_LE(timed, s["forward_seconds"].get<double>() + 1e-6) << phase;
    EXPECT_NEAR(s["gemm_flops_per_second"].get<double>(), gemm_flops / gemm_seconds,
                1e-9 * gemm_flops / gemm_seconds)
        << phase;
    EXPECT_TRUE(s["gemm_peak_fraction"].is_null()) << "--no-limits: no peak to be a fraction of";
  }
  // Each decode token: q, k, v (128 + 64 + 64 outputs of 128), o (128 of 128), gate and up (2 x
  // 344 of 128), down (128 of 344) in each of 4 layers, and its row of logits (32 000 of 128).
  const double tokens =
      j["decode_tokens_per_second"].get<double>() * j["decode_seconds"].get<double>();
  const std::map<std::string, double> per_token = {{"GEMM q, k, v", 4 * 2.0 * 256 * 128},
                                                   {"GEMM o", 4 * 2.0 * 128 * 128},
                                                   {"GEMM gate, up", 4 * 2.0 * 688 * 128},
                                                   {"GEMM down", 4 * 2.0 * 128 * 344},
                                                   {"GEMM lm_head", 2.0 * 32000 * 128}};
  ASSERT_EQ(decode_flops.size(), per_token.size());
  for (const auto& [op, f] : per_token)
    EXPECT_NEAR(decode_flops[op], f * tokens, 1e-6 * f * tokens) << op;
  fs::remove(path);
}

TEST(Bench, BadRequestsAreRefusedWithTheValues) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"--shape tiny --prompts 1", "--shape tiny has no weight files: add --random-weights"},
      {"--shape tiny --random-weights --input-len 900 --output-len 200 --no-limits",
       "--input-len 900 + --output-len 200 exceeds the model's context of 1024"},
      {"--shape tiny --random-weights --input-len 9:3 --no-limits", "--input-len '9:3'"},
      {"--shape tiny --random-weights --model /tmp --no-limits",
       "either --model DIR or --shape NAME --random-weights, not both"},
      {"--shape tiny --random-weights --prompts 0", "--prompts: must be at least 1, got 0"},
      {"--shape tiny --random-weights --max-seqs -4", "--max-seqs: must be at least 1, got -4"},
      // An unwritable --json is refused before the benchmark runs, not after it.
      {"--shape tiny --random-weights --no-limits --json /nonexistent-dir/x.json",
       "cannot write --json file /nonexistent-dir/x.json"},
      {"--shape nope --random-weights --no-limits", "unknown shape 'nope'"},
  };
  for (const auto& c : cases) {
    const auto r = run_shell(binary() + " bench " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("tpllama bench:"), std::string::npos)
        << "it ran the benchmark: " << c.args;
  }
}

}  // namespace
}  // namespace tpllama
