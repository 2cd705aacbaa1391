// The Distributed fixture of the tpllama binary under mpirun (layouts_cli_test.cpp and
// failures_cli_test.cpp): stories260K converted once per suite, its single-rank output to compare
// with, and helpers that start, stall and kill jobs. One class in one namespace, so both files'
// tests form the one gtest suite `Distributed`.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../e2e/cli_util.h"

namespace tpllama::cli_test {

class Distributed : public ::testing::Test {
 protected:
  using Clock = std::chrono::steady_clock;

  static void SetUpTestSuite() {
    ConvertedStories c = ConvertedStories::make("mpi_cli");
    stories_ = c.stories;
    if (stories_.empty()) return;
    work_ = c.work;
    model_ = c.model;
    setup_ = c.convert;
    references_ = read_jsonl(stories_ + "/reference_greedy.jsonl");
    input_ = work_ + "/prompts.jsonl";
    write_reference_prompts(input_, references_, [](size_t i) { return json(i); });
    single_ = run_shell(binary() + " run --model " + model_ + " --input " + input_ + " --output " +
                        work_ + "/single.jsonl");
    // Sampled requests: every sampler stage, seeded per request; penalties; n samples.
    sampled_input_ = work_ + "/sampled.jsonl";
    std::ofstream sampled(sampled_input_);
    const char* prompts[] = {"Once upon a time", "The little dog", "She said"};
    for (int i = 0; i < 6; ++i)
      sampled << json({{"id", i},
                       {"prompt", prompts[i % 3]},
                       {"max_tokens", 40},
                       {"temperature", 0.9},
                       {"top_k", i % 2 ? 0 : 50},
                       {"top_p", 0.95},
                       {"min_p", i % 3 == 0 ? 0.05 : 0.0},
                       {"seed", 1000 + i}})
                     .dump()
              << "\n";
    // Penalties, biases on both halves of the vocabulary and min_tokens: edits that each TP rank
    // applies to its own slice, greedy and sampled.
    sampled << json({{"id", 6},
                     {"prompt", prompts[0]},
                     {"max_tokens", 40},
                     {"repetition_penalty", 1.5},
                     {"frequency_penalty", 0.5},
                     {"presence_penalty", 0.3},
                     {"logit_bias", {{"300", 2}, {"10", -1}}}})
                   .dump()
            << "\n"
            << json({{"id", 7},
                     {"prompt", prompts[1]},
                     {"max_tokens", 40},
                     {"min_tokens", 30},
                     {"logit_bias", {{"2", 8}}},
                     {"presence_penalty", 0.2}})
                   .dump()
            << "\n"
            << json({{"id", 8},
                     {"prompt", prompts[2]},
                     {"max_tokens", 40},
                     {"temperature", 0.8},
                     {"repetition_penalty", 1.2},
                     {"frequency_penalty", 0.4},
                     {"seed", 2000}})
                   .dump()
            << "\n"
            // n samples sharing their prompt's blocks (each copies the partial one it writes),
            // seeded per sample; and greedy samples with penalties.
            << json({{"id", 9},
                     {"prompt", prompts[0]},
                     {"max_tokens", 40},
                     {"n", 4},
                     {"temperature", 0.9},
                     {"top_p", 0.95},
                     {"seed", 3000}})
                   .dump()
            << "\n"
            << json({{"id", 10},
                     {"prompt", prompts[1]},
                     {"max_tokens", 30},
                     {"n", 3},
                     {"frequency_penalty", 0.6}})
                   .dump()
            << "\n"
            // Structured outputs: grammar masks that each TP rank applies to its own slice, greedy
            // and sampled, and for the samples of one request.
            << json::parse(R"({"id": 11, "prompt": "Once upon a time", "max_tokens": 60,
                "response_format": {"type": "json_schema", "json_schema": {"name": "story",
                "schema": {"type": "object", "properties": {"name": {"type": "string",
                "maxLength": 12}, "happy": {"type": "boolean"}, "mood": {"enum": ["sad", "glad"]}},
                "required": ["name", "happy", "mood"]}}}})")
                   .dump()
            << "\n"
            << json({{"id", 12},
                     {"prompt", prompts[2]},
                     {"max_tokens", 20},
                     {"temperature", 0.9},
                     {"seed", 4000},
                     {"guided_regex", "[A-Z][a-z]{2,8} (is|was) [a-z]+\\."}})
                   .dump()
            << "\n"
            << json({{"id", 13},
                     {"prompt", prompts[1]},
                     {"max_tokens", 30},
                     {"n", 3},
                     {"temperature", 1.0},
                     {"seed", 5000},
                     {"guided_choice", {"the dog ran", "the cat sat", "a bird sang"}}})
                   .dump()
            << "\n";
    sampled.close();
    single_sampled_ = run_shell(binary() + " run --model " + model_ + " --input " + sampled_input_ +
                                " --output " + work_ + "/single_sampled.jsonl");
  }
  static void TearDownTestSuite() {
    if (!work_.empty()) fs::remove_all(work_);
  }
  void SetUp() override {
    if (stories_.empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing;
    ASSERT_EQ(setup_.exit_code, 0) << setup_.output;
    ASSERT_EQ(single_.exit_code, 0) << single_.output;
    ASSERT_EQ(single_sampled_.exit_code, 0) << single_sampled_.output;
  }

  static std::string mpirun(int np) {
    return "mpirun -np " + std::to_string(np) + " --oversubscribe ";
  }

  // kill -9 of a whole job started with spawn_shell(..., new_group=true), as a scheduler would:
  // mpirun's process group and every rank under it; every rank must be gone within 10 s.
  static void kill_whole_job(pid_t job) {
    CommandResult ranks = run_shell("pgrep -P " + std::to_string(job));
    ::kill(-job, SIGKILL);
    std::istringstream pids(ranks.output);
    std::vector<pid_t> rank_pids;
    for (long p; pids >> p;) rank_pids.push_back(static_cast<pid_t>(p));
    for (pid_t p : rank_pids) ::kill(p, SIGKILL);
    ::waitpid(job, nullptr, 0);
    EXPECT_TRUE(wait_until_gone(rank_pids, 10).empty()) << "a killed rank is still alive";
  }

  // SIGUSR1 to mpirun once `out` has 100 records: the job must stop gracefully (status 75) before
  // the end of its 3000 requests.
  static void stop_with_usr1(pid_t job, const std::string& out) {
    wait_for_lines(out, 100);
    ::kill(job, SIGUSR1);
    int status = 0;
    ::waitpid(job, &status, 0);
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 75);
    EXPECT_LT(count_lines(out), 3000u);
  }

  // 3000 numbered prompts in work_/NAME_in.txt, and their uninterrupted output under `flags` on
  // `ranks` ranks in work_/NAME_full.jsonl; returns the input's path.
  std::string numbered_prompts_and_full_run(const std::string& name, int ranks,
                                            const std::string& flags) {
    const std::string in = work_ + "/" + name + "_in.txt";
    {
      std::ofstream f(in);
      for (int i = 0; i < 3000; ++i)
        f << (i % 2 ? "Once upon a time " : "The little dog ") << i << "\n";
    }
    CommandResult r = run_shell(mpirun(ranks) + binary() + " run --model " + model_ + " --input " +
                                in + " --output " + work_ + "/" + name + "_full.jsonl" + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return in;
  }

  // Whether pid is a live process (not gone, not a zombie): the ranks are mpirun's children, not
  // ours, so waitpid cannot tell.
  static bool alive(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(stat, text)) return false;
    const size_t close = text.rfind(')');  // "pid (comm) S ...": the state follows the name
    return close == std::string::npos || close + 2 >= text.size() ||
           (text[close + 2] != 'Z' && text[close + 2] != 'X');
  }
  // Waits up to `seconds` for every pid to be gone; returns those still alive.
  static std::vector<pid_t> wait_until_gone(const std::vector<pid_t>& pids, double seconds) {
    std::vector<pid_t> left = pids;
    const auto start = Clock::now();
    while (true) {
      std::erase_if(left, [](pid_t p) { return !alive(p); });
      if (left.empty() || std::chrono::duration<double>(Clock::now() - start).count() > seconds)
        return left;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // The process among `pids` that Open MPI started as world rank `rank` (its environment says), or
  // 0.
  static pid_t world_rank_process(const std::vector<pid_t>& pids, int rank) {
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    for (pid_t p : pids) {
      std::ifstream environ("/proc/" + std::to_string(p) + "/environ", std::ios::binary);
      for (std::string entry; std::getline(environ, entry, '\0');)
        if (entry == want) return p;
    }
    return 0;
  }

  // A two-stage job over numbered prompts (see numbered_prompts_and_full_run) whose last rank is
  // stopped (SIGSTOP: a hung node) once 50 records are written; then USR1 to mpirun if asked.
  // Waits up to 60 s for the job to end, and kills what is left of it.
  struct StalledJob {
    bool ended = false;
    int status = 0;
    double seconds = 0;  // from the stall to the job's end
    std::string log;
  };
  static constexpr const char* kStalledFlags = " --pp 2 --max-tokens 40 --threads 1";
  StalledJob run_and_stall_the_last_rank(const std::string& name, const std::string& extra_flags,
                                         bool then_usr1) {
    StalledJob job;
    const std::string in = numbered_prompts_and_full_run(name, 2, kStalledFlags);
    const std::string out = work_ + "/" + name + ".jsonl", log_path = work_ + "/" + name + ".log";
    const pid_t launcher =
        spawn_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " + in +
                    " --output " + out + kStalledFlags + extra_flags + " > " + log_path + " 2>&1");
    EXPECT_GT(launcher, 0);
    if (launcher <= 0) return job;
    wait_for_lines(out, 50);
    CommandResult children = run_shell("pgrep -P " + std::to_string(launcher));
    std::istringstream pids(children.output);
    std::vector<pid_t> ranks;
    for (long p; pids >> p;) ranks.push_back(static_cast<pid_t>(p));
    EXPECT_EQ(ranks.size(), 2u) << children.output;
    const pid_t last = world_rank_process(ranks, 1);
    EXPECT_GT(last, 0) << "no process of world rank 1 among " << children.output;
    if (last > 0) {
      EXPECT_EQ(::kill(last, SIGSTOP), 0);
    }
    const auto stalled_at = Clock::now();
    if (then_usr1) ::kill(launcher, SIGUSR1);
    pid_t done = 0;
    while ((done = ::waitpid(launcher, &job.status, WNOHANG)) == 0 &&
           Clock::now() - stalled_at < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    job.seconds = std::chrono::duration<double>(Clock::now() - stalled_at).count();
    for (pid_t p : ranks)
      ::kill(p, SIGKILL);  // a stopped rank mpirun left behind must not outlive the test
    job.ended = done != 0;
    if (!job.ended) {
      ::kill(launcher, SIGKILL);
      ::waitpid(launcher, nullptr, 0);
    }
    std::ifstream log(log_path);
    job.log.assign(std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>());
    return job;
  }
  // After run_and_stall_the_last_rank: --resume (which cuts a torn line, if any) completes the
  // output, every request once, as the uninterrupted run wrote it.
  void expect_resume_gives_every_request_once(const std::string& name) {
    const std::string out = work_ + "/" + name + ".jsonl";
    CommandResult r =
        run_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " + work_ + "/" +
                  name + "_in.txt --output " + out + kStalledFlags + " --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(lines_by_id(out), lines_by_id(work_ + "/" + name + "_full.jsonl"));
    EXPECT_EQ(count_lines(out), 3000u);
  }

  // Records keyed by id, each as its exact output line.
  static std::map<int, std::string> lines_by_id(const std::string& path) {
    std::map<int, std::string> m;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) m[json::parse(line)["id"].get<int>()] = line;
    return m;
  }

  void expect_same_as_single_rank(const std::string& output) {
    auto single = lines_by_id(work_ + "/single.jsonl"), got = lines_by_id(output);
    ASSERT_EQ(got.size(), references_.size());
    EXPECT_EQ(got, single);
    for (size_t i = 0; i < references_.size(); ++i) {
      const json& ref = references_[i];
      EXPECT_EQ(json::parse(got[static_cast<int>(i)])["text"].get<std::string>(),
                ref["output"].get<std::string>().substr(ref["prompt"].get<std::string>().size()));
    }
  }

  static inline std::string stories_, work_, model_, input_, sampled_input_;
  static inline CommandResult setup_, single_, single_sampled_;
  static inline std::vector<json> references_;
};

}  // namespace tpllama::cli_test
