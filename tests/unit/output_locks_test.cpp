// The output checks against another job's lock: a file a running tpllama holds (OutputLock) is
// refused before any work and never cut, whichever flag names it; files nobody holds, and
// streams, pass. Also the reasons the checks give for a file that cannot be written.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "app/output_files.h"
#include "core/error.h"
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
  const OutputLock other_job(path);
  for (const char* flag : {"--output", "--stats", "--trace", "--json", "--windows"}) {
    const std::string what = error_of([&] { check_output_files({}, {{flag, path}}); });
    EXPECT_NE(what.find(std::string(flag) + " " + path + " is locked by another tpllama process"), std::string::npos)
        << flag << ": " << what;
  }
  EXPECT_TRUE(locked_by_another_writer(path));
  EXPECT_EQ(read_file(path), "{\"id\":1}\n") << "the check cut the other job's file";
}

TEST(OutputLocks, WritingAFileAnotherWriterHoldsIsRefusedWithoutCuttingIt) {
  const std::string path = testing_util::fresh_dir("locks_write") + "/same.json";
  std::ofstream(path) << "{\"id\":1}\n";
  const OutputLock other_job(path);
  const std::string what = error_of([&] { write_json_file(path, nlohmann::json::object(), "--stats"); });
  EXPECT_NE(what.find("--stats " + path + " is locked by another tpllama process"), std::string::npos) << what;
  EXPECT_EQ(read_file(path), "{\"id\":1}\n");
}

TEST(OutputLocks, FilesNobodyHoldsAndStreamsPass) {
  const std::string dir = testing_util::fresh_dir("locks_free");
  const std::string held_before = dir + "/done.json", missing = dir + "/new.json";
  std::ofstream(held_before) << "{}\n";
  { const OutputLock finished_job(held_before); }  // a job that has ended holds nothing
  EXPECT_FALSE(locked_by_another_writer(held_before));
  EXPECT_FALSE(locked_by_another_writer(missing));
  EXPECT_FALSE(locked_by_another_writer("/dev/null"));
  EXPECT_EQ(error_of([&] {
              check_output_files({}, {{"--output", held_before}, {"--stats", missing}, {"--trace", "/dev/null"}});
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
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  std::filesystem::permissions(dir, std::filesystem::perms::others_read | std::filesystem::perms::others_exec,
                               std::filesystem::perm_options::add);
  EXPECT_EXIT(
      {
        if (::geteuid() == 0 && ::setuid(65534) != 0) ::_exit(3);
        std::fputs(error_of([&] { check_output_files({}, {{"--output", path}}); }).c_str(), stderr);
        ::_exit(1);
      },
      ::testing::ExitedWithCode(1), "cannot write --output file .*read_only.jsonl: Permission denied");
}

}  // namespace
}  // namespace tpllama
