// The output sidecar (OUTPUT.tpllama.json) that --resume checks: what it records reads back as it
// was written, every difference from this run is named with both values, the model is compared by
// fingerprint (a copy elsewhere is the same model), and a missing sidecar is no refusal.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "io/output_sidecar.h"
#include "test_util.h"

namespace tpllama {
namespace {

OutputJob greedy_job() {
  OutputJob job;
  job.model = "stories260K";
  job.model_fingerprint = "0123456789abcdef";
  job.settings = {{"--dtype", "f32"}, {"--temperature", setting_number(0.0)}, {"--seed", "0"}, {"--input", "/p.jsonl"}};
  return job;
}

TEST(OutputSidecar, WhatIsWrittenReadsBackNextToTheOutput) {
  const std::string output = testing_util::fresh_dir("sidecar_round") + "/out.jsonl";
  write_sidecar(output, greedy_job());
  EXPECT_TRUE(std::filesystem::exists(output + ".tpllama.json"));
  EXPECT_EQ(sidecar_path(output), output + ".tpllama.json");
  const std::optional<OutputJob> read = read_sidecar(output);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->model, "stories260K");
  EXPECT_EQ(read->model_fingerprint, "0123456789abcdef");
  EXPECT_EQ(read->settings, greedy_job().settings);
  EXPECT_EQ(output_job_difference(output, *read, greedy_job()), "");
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(output).parent_path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "a temporary file was left";
}

TEST(OutputSidecar, EveryDifferenceIsNamedWithBothValues) {
  OutputJob here = greedy_job();
  here.settings[0].second = "bf16";
  here.settings[1].second = setting_number(1.5);
  here.model = "other";
  here.model_fingerprint = "fedcba9876543210";
  const std::string difference = output_job_difference("out.jsonl", greedy_job(), here);
  EXPECT_NE(difference.find("out.jsonl was made with --model stories260K (fingerprint 0123456789abcdef), this run has "
                            "other (fingerprint fedcba9876543210)"),
            std::string::npos)
      << difference;
  EXPECT_NE(difference.find("--temperature 0, this run has 1.5"), std::string::npos) << difference;
  EXPECT_NE(difference.find("--dtype f32, this run has bf16"), std::string::npos) << difference;
  EXPECT_EQ(difference.find("--seed"), std::string::npos) << difference;
}

TEST(OutputSidecar, AModelCopyUnderAnotherNameIsTheSameModel) {
  OutputJob here = greedy_job();
  here.model = "stories260K-staged";
  EXPECT_EQ(output_job_difference("out.jsonl", greedy_job(), here), "");
}

TEST(OutputSidecar, ASettingOnlyOneSideRecordsIsNoDifference) {
  OutputJob here = greedy_job();
  here.settings.emplace_back("--min-p", "0.05");
  EXPECT_EQ(output_job_difference("out.jsonl", greedy_job(), here), "");
}

TEST(OutputSidecar, AMissingSidecarIsNoneAndABrokenOneIsRefusedNamingIt) {
  const std::string output = testing_util::fresh_dir("sidecar_missing") + "/out.jsonl";
  EXPECT_FALSE(read_sidecar(output).has_value());
  std::ofstream(output + ".tpllama.json") << "{\"something\": 1}\n";
  try {
    read_sidecar(output);
    FAIL() << "a sidecar without tpllama_output was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(output + ".tpllama.json"), std::string::npos) << e.what();
  }
}

TEST(OutputSidecar, NumbersAreWrittenShortest) {
  EXPECT_EQ(setting_number(0.0), "0");
  EXPECT_EQ(setting_number(1.5), "1.5");
  EXPECT_EQ(setting_number(0.9), "0.9");
}

}  // namespace
}  // namespace tpllama
