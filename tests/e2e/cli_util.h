// Helpers for tests that drive the tpllama binary: run a shell command with a time limit and
// capture its output, find the shipped stories260K, read JSONL.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shipped_models.h"

namespace tpllama::cli_test {

namespace fs = std::filesystem;
using nlohmann::json;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_shell(const std::string& command) {
  static int counter = 0;
  // Tests may run as root (CI does); Open MPI refuses that unless told.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  std::string log = (fs::temp_directory_path() / ("tpllama_e2e_" + std::to_string(::getpid()) +
                                                  "_" + std::to_string(counter++) + ".log"))
                        .string();
  int status = std::system(("timeout 120 " + command + " >" + log + " 2>&1").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  fs::remove(log);
  return r;
}

inline std::string binary() {
  const char* b = std::getenv("TPLLAMA_BIN");
  return b ? b : TPLLAMA_DEFAULT_BIN;
}

using shipped::stories_dir;

inline std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

inline std::map<std::string, json> by_id(const std::vector<json>& records) {
  std::map<std::string, json> m;
  for (const json& r : records) m[r["id"].dump()] = r;
  return m;
}

// Writes the reference records' prompts as JSONL requests whose max_tokens reproduce run.c's step
// counts; id(i) names request i, extra adds fields to every request.
inline void write_reference_prompts(const std::string& path, const std::vector<json>& references,
                                    const std::function<json(size_t)>& id,
                                    const json& extra = json::object()) {
  std::ofstream out(path);
  for (size_t i = 0; i < references.size(); ++i) {
    const json& r = references[i];
    json req = {
        {"id", id(i)},
        {"prompt", r["prompt"]},
        {"max_tokens", r["steps"].get<int>() - static_cast<int>(r["prompt_tokens"].size()) + 1}};
    req.update(extra);
    out << req.dump() << "\n";
  }
}

// stories260K converted into a fresh work directory, for one test suite.
struct ConvertedStories {
  std::string stories;  // models/stories260K, "" when missing
  std::string work;     // the suite's temporary directory
  std::string model;    // the converted Hugging Face directory inside it
  CommandResult convert;

  static ConvertedStories make(const std::string& tag) {
    ConvertedStories c;
    c.stories = stories_dir();
    if (c.stories.empty()) return c;
    c.work = (fs::temp_directory_path() / ("tpllama_" + tag + "_" + std::to_string(::getpid())))
                 .string();
    fs::remove_all(c.work);
    fs::create_directories(c.work);
    c.model = c.work + "/stories260K";
    c.convert =
        run_shell(binary() + " convert --from llama2c --checkpoint " + c.stories +
                  "/stories260K.bin --tokenizer " + c.stories + "/tok512.model --out " + c.model);
    return c;
  }
};

// A suite over the converted stories260K model: converted once before the suite's first test
// (Derived, the suite's own fixture, names its work directory with kTag and gets its own copy of
// the members), removed after its last; each test fails when models/stories260K is missing.
template <class Derived>
class StoriesSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ConvertedStories c = ConvertedStories::make(Derived::kTag);
    stories_ = c.stories;
    work_ = c.work;
    model_ = c.model;
    convert_ = c.convert;
  }
  static void TearDownTestSuite() {
    if (!work_.empty()) fs::remove_all(work_);
  }
  void SetUp() override {
    if (stories_.empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing;
    ASSERT_EQ(convert_.exit_code, 0) << convert_.output;
  }

  // Runs `requests` (one JSONL line each, in the file work_/name.jsonl) with `flags`, expecting
  // exit status 0; the records by id: a string id as it is, a number as its digits.
  static std::map<std::string, json> run_requests(const std::string& name,
                                                  const std::vector<json>& requests,
                                                  const std::string& flags = "") {
    const std::string in = work_ + "/" + name + ".jsonl", out = work_ + "/" + name + "_out.jsonl";
    {
      std::ofstream f(in);
      for (const json& r : requests) f << r.dump() << "\n";
    }
    const CommandResult r = run_shell(binary() + " run --model " + model_ + " --input " + in +
                                      " --output " + out + " --log-interval 0 --overwrite" + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, json> records;
    for (const json& rec : read_jsonl(out))
      records[rec["id"].is_string() ? rec["id"].get<std::string>() : rec["id"].dump()] = rec;
    return records;
  }

  static inline std::string stories_, work_, model_;
  static inline CommandResult convert_;
};

// Starts a shell command in the background (exec'd, so the pid is the command's own); with
// new_group it leads its own process group, so the whole job can be killed at once.
inline pid_t spawn_shell(const std::string& command, bool new_group = false) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (new_group) ::setpgid(0, 0);
    const std::string cmd = "exec " + command;
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid > 0 && new_group) ::setpgid(pid, pid);
  return pid;
}

struct ProcessExit {
  int code =
      -1;  // the exit status; 128 + n for a signal; -1: still running at the deadline (killed)
  double seconds = 0;    // from the call until the exit
  long max_rss_kib = 0;  // the process's peak resident memory
  std::string log;
};

// Waits for pid (spawn_shell'd with new_group, its output sent to log) up to `limit`; kills its
// group past it.
inline ProcessExit wait_for_exit(pid_t pid, const std::string& log, std::chrono::seconds limit) {
  ProcessExit e;
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = ::wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) {
      e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() - start > limit) {
      ::kill(-pid, SIGKILL);
      ::wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  e.max_rss_kib = usage.ru_maxrss;
  std::ifstream in(log);
  e.log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return e;
}

// Opens the writing end of a FIFO once a reader has it open (O_NONBLOCK: ENXIO until then), for
// up to 30 s; -1 if none came.
inline int open_fifo_writer(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

inline size_t count_lines(const std::string& path) {
  std::ifstream f(path);
  return static_cast<size_t>(
      std::count(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>(), '\n'));
}

// Polls until path holds at least n complete lines or timeout passes; returns the lines seen.
inline size_t wait_for_lines(const std::string& path, size_t n,
                             std::chrono::seconds timeout = std::chrono::seconds(60)) {
  const auto start = std::chrono::steady_clock::now();
  size_t lines = count_lines(path);
  while (lines < n && std::chrono::steady_clock::now() - start < timeout) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lines = count_lines(path);
  }
  return lines;
}

inline int count_occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

}  // namespace tpllama::cli_test
