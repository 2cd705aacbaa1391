// The output checks against another job's lock: a file a running tpllama holds (OutputHolds, or
// OutputHolds from the job's start) is refused before any work and never cut, whichever flag names
// it; files nobody holds, and streams, pass. Also the reasons the checks give for a file that
// cannot be written, is the model's, holds an earlier run's records, or is a directory over its
// source.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "app/output_files.h"
#include "core/error.h"
#include "io/output_holds.h"
#include "io/output_sidecar.h"
#include "io/result_writer.h"
#include "test_util.h"

namespace tpllama {
namespace {

using testing_util::error_of;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the Error `f` throws; "" when it throws none.
// Locks are per open file, so a lock this test holds is "another writer" to a second open of the
// file: as another process's would be.
TEST(OutputLocks, AFileAnotherWriterHoldsIsRefusedForEveryFlagAndKept) {
  const std::string path = testing_util::fresh_dir("locks_held") + "/same.jsonl";
  std::ofstream(path) << "{\"id\":1}\n";
  OutputHolds other_job;
  other_job.hold("--output", path);
  for (const char* flag : {"--output", "--stats", "--trace", "--json", "--windows"}) {
    const std::string what = error_of([&] { check_output_files({}, {{flag, path}}); });
    EXPECT_NE(what.find(std::string(flag) + " " + path + " is locked by another tpllama process"),
              std::string::npos)
        << flag << ": " << what;
  }
  EXPECT_TRUE(locked_by_another_writer(path));
  EXPECT_EQ(read_file(path), "{\"id\":1}\n") << "the check cut the other job's file";
}

TEST(OutputLocks, WritingAFileAnotherWriterHoldsIsRefusedWithoutCuttingIt) {
  const std::string path = testing_util::fresh_dir("locks_write") + "/same.json";
  std::ofstream(path) << "{\"id\":1}\n";
  OutputHolds other_job;
  other_job.hold("--output", path);
  const std::string what =
      error_of([&] { write_json_file(path, nlohmann::json::object(), "--stats"); });
  EXPECT_NE(what.find("--stats " + path + " is locked by another tpllama process"),
            std::string::npos)
      << what;
  EXPECT_EQ(read_file(path), "{\"id\":1}\n");
}

TEST(OutputLocks, FilesNobodyHoldsAndStreamsPass) {
  const std::string dir = testing_util::fresh_dir("locks_free");
  const std::string held_before = dir + "/done.json", missing = dir + "/new.json";
  std::ofstream(held_before) << "{}\n";
  {
    OutputHolds finished_job;  // a job that has ended holds nothing
    finished_job.hold("--output", held_before);
  }
  EXPECT_FALSE(locked_by_another_writer(held_before));
  EXPECT_FALSE(locked_by_another_writer(missing));
  EXPECT_FALSE(locked_by_another_writer("/dev/null"));
  EXPECT_EQ(error_of([&] {
              check_output_files(
                  {}, {{"--output", held_before}, {"--stats", missing}, {"--trace", "/dev/null"}});
            }),
            "");
  EXPECT_FALSE(std::filesystem::exists(missing)) << "the check created a file";
  write_json_file(held_before, nlohmann::json{{"a", 1}}, "--stats");
  EXPECT_EQ(nlohmann::json::parse(read_file(held_before)), (nlohmann::json{{"a", 1}}));
}

// "cannot write --output file X" alone leaves the user guessing: the reason comes with it.
// Root may write any file, so the check runs in a child that, when root, first becomes nobody.
TEST(OutputLocks, AnUnwritableFileIsRefusedWithTheReason) {
  const std::string dir = testing_util::fresh_dir("locks_perm");
  const std::string path = dir + "/read_only.jsonl";
  std::ofstream(path) << "x\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  std::filesystem::permissions(
      dir, std::filesystem::perms::others_read | std::filesystem::perms::others_exec,
      std::filesystem::perm_options::add);
  EXPECT_EXIT(
      {
        if (::geteuid() == 0 && ::setuid(65534) != 0) ::_exit(3);
        std::fputs(error_of([&] { check_output_files({}, {{"--output", path}}); }).c_str(), stderr);
        ::_exit(1);
      },
      ::testing::ExitedWithCode(1),
      "cannot write --output file .*read_only.jsonl: Permission denied");
}

// A file a job will write, held from its start: a missing one is created for it and another job's
// check refuses it; let go, it passes again.
TEST(OutputLocks, AHeldFileIsRefusedToAnotherJobFromTheJobsStart) {
  const std::string dir = testing_util::fresh_dir("holds_start");
  const std::string trace = dir + "/a.trace.json", records = dir + "/a.jsonl";
  std::ofstream(records) << "{\"id\":1}\n";
  OutputHolds job_a;
  job_a.hold("--trace", trace);
  job_a.hold("--output", records);
  EXPECT_TRUE(std::filesystem::exists(trace));
  EXPECT_TRUE(locked_by_another_writer(trace));
  for (const std::string& path : {trace, records}) {
    const std::string what = error_of([&] { check_output_files({}, {{"--output", path}}); });
    EXPECT_NE(what.find("--output " + path + " is locked by another tpllama process"),
              std::string::npos)
        << what;
  }
  EXPECT_NE(error_of([&] {
              OutputHolds job_b;
              job_b.hold("--stats", trace);
            }).find("is locked by another tpllama"),
            std::string::npos);
  job_a.release(trace);
  EXPECT_FALSE(locked_by_another_writer(trace));
  EXPECT_EQ(read_file(records), "{\"id\":1}\n") << "holding a file changed it";
}

// The sidecar is written anew by a rename: the new file is locked before it takes the name, so the
// sidecar stays held, with the new content.
TEST(OutputLocks, ASidecarWrittenAnewStaysHeld) {
  const std::string output = testing_util::fresh_dir("holds_sidecar") + "/out.jsonl";
  OutputHolds job;
  job.hold("--output's sidecar", sidecar_path(output));
  OutputJob made;
  made.model = "m";
  made.model_fingerprint = "0123456789abcdef";
  write_sidecar(output, made, &job);
  EXPECT_TRUE(locked_by_another_writer(sidecar_path(output)));
  ASSERT_TRUE(read_sidecar(output).has_value());
  EXPECT_EQ(read_sidecar(output)->model_fingerprint, "0123456789abcdef");
}

// A job that fails leaves no empty file it created behind; a file that was there, or one it wrote
// into, stays. A job that ends well keeps even an empty one (a run of no requests).
TEST(OutputLocks, AFailedJobRemovesOnlyTheEmptyFilesItCreated) {
  const std::string dir = testing_util::fresh_dir("holds_failed");
  const std::string made = dir + "/made.json", written = dir + "/written.jsonl",
                    there = dir + "/there.json";
  std::ofstream(there).flush();
  try {
    OutputHolds job;
    for (const std::string& path : {made, written, there}) job.hold("--stats", path);
    std::ofstream(written) << "{\"id\":1}\n";
    throw Error("the job failed");
  } catch (const Error&) {
  }
  EXPECT_FALSE(std::filesystem::exists(made));
  EXPECT_EQ(read_file(written), "{\"id\":1}\n");
  EXPECT_TRUE(std::filesystem::exists(there));
  {
    OutputHolds job;
    job.hold("--output", made);
  }
  EXPECT_TRUE(std::filesystem::exists(made)) << "a job that ended well lost its output";
}

// Every file a command writes is checked against the model's files, whichever spelling names them
// (a link to the directory included), and those not there yet that a run would read.
TEST(OutputLocks, AFileOfTheModelIsRefusedAsAnOutput) {
  const std::string dir = testing_util::fresh_dir("model_outputs"), model = dir + "/m",
                    link = dir + "/m_link";
  std::filesystem::create_directories(model);
  for (const char* name : {"config.json", "model-00001-of-00002.safetensors", "tokenizer.model"})
    std::ofstream(model + "/" + name) << "x";
  std::filesystem::create_directory_symlink(model, link);
  const struct {
    std::string flag, path, file;
  } cases[] = {{"--output", link + "/config.json", model + "/config.json"},
               {"--stats", model + "/model-00001-of-00002.safetensors",
                model + "/model-00001-of-00002.safetensors"},
               {"--trace", model + "/./tokenizer.model", model + "/tokenizer.model"},
               {"--json", model + "/generation_config.json", model + "/generation_config.json"}};
  for (const auto& c : cases) {
    const std::string what = error_of([&] {
      check_output_files({}, {{c.flag, c.path}}, model_files(model));
    });
    EXPECT_NE(what.find(c.flag + " " + c.path + " is a file of the model (" + c.file +
                        "); refusing to overwrite it"),
              std::string::npos)
        << what;
  }
  const std::string tmpl = dir + "/t.jinja";
  std::ofstream(tmpl) << "{{ x }}";
  EXPECT_NE(error_of([&] {
              check_output_files({}, {{"--output", tmpl}}, model_files(model, tmpl));
            }).find("is the --chat-template file (" + tmpl + ")"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              check_output_files({}, {{"--output", model + "/out.jsonl"}}, model_files(model));
            }),
            "");
}

// A records file an earlier run filled is kept unless the command is told otherwise; an empty or
// missing one, or a stream, is written.
TEST(OutputLocks, ANonEmptyRecordsFileIsKeptUnlessAllowed) {
  const std::string dir = testing_util::fresh_dir("records_kept");
  const std::string full = dir + "/full.jsonl", empty = dir + "/empty.jsonl";
  std::ofstream(full) << "{\"id\":1}\n";  // 9 bytes
  std::ofstream(empty).flush();
  const std::string how = "pass --resume to keep them, or --overwrite to replace them";
  EXPECT_EQ(error_of([&] { check_not_replacing("--output", full, false, how); }),
            "--output " + full + " already holds 9 bytes (an earlier run's records?): " + how +
                "; or give another file");
  for (const std::string& path : {empty, dir + "/new.jsonl", std::string("/dev/null")})
    EXPECT_EQ(error_of([&] { check_not_replacing("--output", path, false, how); }), "") << path;
  EXPECT_EQ(error_of([&] { check_not_replacing("--output", full, true, how); }), "");
}

// shard and convert fill --out: never the source, nor a directory holding it or inside it. A
// sibling whose name starts like the source's is another directory.
TEST(OutputLocks, AnOutDirectoryOverItsSourceIsRefused) {
  const std::string dir = testing_util::fresh_dir("out_dirs"), model = dir + "/m";
  std::filesystem::create_directories(model);
  std::ofstream(dir + "/ckpt.bin") << "x";
  const auto refusal = [&](const std::string& out, const std::string& source) {
    return error_of([&] { check_out_directory(out, {{"the model directory", source}}); });
  };
  EXPECT_NE(refusal(model + "/", model).find("is the model directory itself (" + model + ")"),
            std::string::npos);
  EXPECT_NE(refusal(model + "/shards", model).find("lies inside the model directory " + model),
            std::string::npos);
  EXPECT_NE(refusal(dir, model).find("--out " + dir + " holds the model directory " + model),
            std::string::npos);
  EXPECT_NE(refusal(dir, dir + "/ckpt.bin").find("holds the model directory " + dir + "/ckpt.bin"),
            std::string::npos);
  EXPECT_EQ(refusal(model + "2", model), "");
  EXPECT_EQ(refusal(dir + "/other", dir + "/ckpt.bin"), "");
}

}  // namespace
}  // namespace tpllama
