// The output sidecar (OUTPUT.tpllama.json) that --resume checks: what it records reads back as it
// was written, every difference from this run is named with both values, the model is compared by
// fingerprint (a copy elsewhere is the same model), the files that shape a record by the hash of
// their content, and a missing sidecar is no refusal.
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
  job.settings = {{"--dtype", "f32"},
                  {"--temperature", setting_number(0.0)},
                  {"--seed", "0"},
                  {"--input", "/p.jsonl"}};
  job.files = {{"tokenizer.model", "af63dc4c8601ec8c"}, {"chat_template.jinja", "none"}};
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
  EXPECT_EQ(read->files, greedy_job().files);
  EXPECT_EQ(output_job_difference(output, *read, greedy_job()), "");
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(output).parent_path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos)
        << "a temporary file was left";
}

TEST(OutputSidecar, EveryDifferenceIsNamedWithBothValues) {
  OutputJob here = greedy_job();
  here.settings[0].second = "bf16";
  here.settings[1].second = setting_number(1.5);
  here.model = "other";
  here.model_fingerprint = "fedcba9876543210";
  const std::string difference = output_job_difference("out.jsonl", greedy_job(), here);
  EXPECT_NE(difference.find("out.jsonl was made with --model stories260K (fingerprint "
                            "0123456789abcdef), this run has "
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

// The hashes are FNV-1a 64 of each whole file: the published test vectors ("" gives
// cbf29ce484222325, "a" af63dc4c8601ec8c, "foobar" 85944171f73967e8). A file not there is "none";
// the model's own template counts only without --chat-template, whose file then counts instead.
TEST(OutputSidecar, TheFilesThatShapeARecordAreHashedWhole) {
  const std::string model = testing_util::fresh_dir("sidecar_files");
  std::ofstream(model + "/tokenizer.model") << "a";
  std::ofstream(model + "/tokenizer_config.json") << "foobar";
  std::ofstream(model + "/chat_template.jinja").flush();
  std::ofstream(model + "/other.jinja") << "a";
  using Files = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(shaping_files(model, ""), (Files{{"tokenizer.model", "af63dc4c8601ec8c"},
                                             {"tokenizer.json", "none"},
                                             {"tokenizer_config.json", "85944171f73967e8"},
                                             {"generation_config.json", "none"},
                                             {"chat_template.jinja", "cbf29ce484222325"}}));
  EXPECT_EQ(shaping_files(model, model + "/other.jinja").back(),
            (std::pair<std::string, std::string>{"--chat-template", "af63dc4c8601ec8c"}));
}

// A file that changed, appeared or went since the output was made is named, with where this run
// reads it; a sidecar of an older tpllama, without the files, checks the rest.
TEST(OutputSidecar, AChangedFileIsNamed) {
  OutputJob here = greedy_job();
  here.model_dir = "/models/m";
  here.files = {{"tokenizer.model", "85944171f73967e8"},
                {"chat_template.jinja", "cbf29ce484222325"}};
  const std::string difference = output_job_difference("out.jsonl", greedy_job(), here);
  EXPECT_NE(
      difference.find(
          "out.jsonl was made with /models/m/tokenizer.model of content af63dc4c8601ec8c, this run "
          "reads 85944171f73967e8: the file changed since"),
      std::string::npos)
      << difference;
  EXPECT_NE(
      difference.find(
          "with no chat_template.jinja, this run reads /models/m/chat_template.jinja: the file was "
          "added since"),
      std::string::npos)
      << difference;
  OutputJob older = greedy_job();
  older.files.clear();
  EXPECT_EQ(output_job_difference("out.jsonl", older, here), "");
  OutputJob edited = greedy_job();
  edited.files = {{"--chat-template", "af63dc4c8601ec8c"}};
  here.files = {{"--chat-template", "none"}};
  EXPECT_NE(output_job_difference("out.jsonl", edited, here)
                .find("the --chat-template file of content af63dc4c8601ec8c, which is gone now"),
            std::string::npos);
}

TEST(OutputSidecar, NumbersAreWrittenShortest) {
  EXPECT_EQ(setting_number(0.0), "0");
  EXPECT_EQ(setting_number(1.5), "1.5");
  EXPECT_EQ(setting_number(0.9), "0.9");
}

}  // namespace
}  // namespace tpllama
