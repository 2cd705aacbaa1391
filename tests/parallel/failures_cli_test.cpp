// The tpllama binary under mpirun when things go wrong: bad layouts are refused within seconds,
// saying why once; a killed job resumes exactly once; SIGUSR1 stops the job gracefully; a quiet
// input stream is no stall; a stalled rank ends the job through --stall-timeout or the stop
// deadline; a killed rank ends the job. (Stops as users send them: stop_signal_cli_test.cpp.)
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "distributed_fixture.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

struct BadLayout {
  int np;
  std::string flags;
  std::string needle;
};

// Names the case in CTest's test names (without it gtest prints the object's bytes, heap addresses
// included, and the names change from one test discovery to the next).
void PrintTo(const BadLayout& b, std::ostream* os) {
  *os << "np " << b.np << " " << b.flags;
}

class BadLayouts : public Distributed, public ::testing::WithParamInterface<BadLayout> {};

TEST_P(BadLayouts, ExitNonZeroWithinSecondsAndSayWhyOnce) {
  const BadLayout b = GetParam();
  const auto start = Clock::now();
  CommandResult r = run_shell(mpirun(b.np) + binary() + " run --model " + model_ + " --input " +
                              input_ + " --output " + work_ + "/bad.jsonl " + b.flags);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(seconds, 30.0);
  EXPECT_NE(r.output.find(b.needle), std::string::npos) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "error:"), 1) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, BadLayouts,
    ::testing::Values(
        BadLayout{4, "--tp 3 --pp 1",
                  "tp (3) x pp (1) = 3 does not divide the number of ranks (4)"},
        BadLayout{4, "--dp 3", "--dp 3 does not divide the number of ranks (4)"},
        BadLayout{4, "--dp 2 --tp 4",
                  "--tp 4 does not divide the ranks of a replica (4 ranks / --dp 2 = 2)"},
        BadLayout{4, "--dp 2 --tp 2 --pp 2",
                  "dp (2) x tp (2) x pp (2) = 8 does not match the number of ranks (4)"},
        BadLayout{3, "--tp 3", "num_attention_heads (8) is not divisible by tp (3)"},
        BadLayout{6, "--pp 6", "pp (6) is larger than the number of layers (5)"},
        BadLayout{2, "--pp 2 --pp-layers 1,1", "--pp-layers sums to 2 but the model has 5 layers"}),
    [](const auto& param_info) {
      return "np" + std::to_string(param_info.param.np) + "_" + std::to_string(param_info.index);
    });

// kill -9 of the whole mpirun job part-way, then --resume: exactly once, same texts (each record
// the two seeded samples of its prompt).
TEST_F(Distributed, KilledJobResumesExactlyOnce) {
  const std::string in = work_ + "/job_in.txt";
  {
    std::ofstream f(in);
    for (int i = 0; i < 2000; ++i)
      f << (i % 2 ? "Once upon a time " : "The little dog ") << i % 89 << "\n";
  }
  const std::string flags = " --tp 2 --pp 2 --max-tokens 8 --max-seqs 16 --n 2 --temperature 0.8";
  const std::string full = work_ + "/job_full.jsonl", out = work_ + "/job.jsonl";
  ASSERT_EQ(run_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                      " --output " + full + flags)
                .exit_code,
            0);
  const pid_t job = spawn_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                                    " --output " + out + flags + " > /dev/null 2>&1",
                                /*new_group=*/true);
  ASSERT_GT(job, 0);
  const size_t lines = wait_for_lines(out, 600);
  kill_whole_job(job);
  ASSERT_LT(lines, 2000u) << "the job finished before it could be killed";
  CommandResult r = run_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                              " --output " + out + flags + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, int> count;
  std::ifstream f(out);
  std::string line;
  while (std::getline(f, line)) ++count[json::parse(line)["id"].dump()];
  EXPECT_EQ(count.size(), 2000u);
  for (const auto& [id, n] : count) EXPECT_EQ(n, 1) << "id " << id;
  EXPECT_EQ(lines_by_id(out), lines_by_id(full));
}

// SIGUSR1 to mpirun (Open MPI forwards it to every rank): the job stops gracefully with status 75
// and --resume completes it exactly once.
TEST_F(Distributed, SigusrOneStopsTheJobGracefully) {
  const std::string flags = " --tp 2 --pp 2 --max-tokens 12";
  const std::string in = numbered_prompts_and_full_run("usr1", 4, flags);
  const std::string out = work_ + "/usr1.jsonl", full = work_ + "/usr1_full.jsonl";
  const pid_t job = spawn_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                                " --output " + out + flags + " > /dev/null 2>&1");
  ASSERT_GT(job, 0);
  stop_with_usr1(job, out);
  CommandResult r = run_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                              " --output " + out + flags + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_by_id(out), lines_by_id(full));
  EXPECT_EQ(count_lines(out), 3000u);
}

// Input from a FIFO that goes quiet for longer than --stall-timeout: rank 0 answers the line it has
// at once, and while it waits for the next it tells the other stage it is alive, so the wait is
// not taken for a hung rank; the job ends at the end of the input.
TEST_F(Distributed, AQuietInputStreamIsNoStallAcrossThePipeline) {
  const std::string fifo = work_ + "/quiet.fifo", out = work_ + "/quiet.jsonl",
                    log = work_ + "/quiet.log";
  fs::remove(fifo);
  fs::remove(out);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const pid_t job = spawn_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " +
                                    fifo + " --output " + out +
                                    " --pp 2 --max-tokens 8 --stall-timeout 3 >" + log + " 2>&1",
                                /*new_group=*/true);
  ASSERT_GT(job, 0);
  const int w = open_fifo_writer(fifo);
  ASSERT_GE(w, 0) << "the job never opened its input";
  const std::string first = "Once upon a time\n", second = "The little dog\n";
  ASSERT_EQ(::write(w, first.data(), first.size()), static_cast<ssize_t>(first.size()));
  EXPECT_EQ(wait_for_lines(out, 1, std::chrono::seconds(60)), 1u)
      << "the first line waited for a second one";
  std::this_thread::sleep_for(std::chrono::seconds(8));  // the stall timeout, over twice
  ASSERT_EQ(::write(w, second.data(), second.size()), static_cast<ssize_t>(second.size()));
  ::close(w);
  const ProcessExit e = wait_for_exit(job, log, std::chrono::seconds(60));
  EXPECT_EQ(e.code, 0) << e.log;
  EXPECT_EQ(e.log.find("the job ends at --stall-timeout"), std::string::npos) << e.log;
  EXPECT_EQ(count_lines(out), 2u);
}

// A stalled rank (SIGSTOP: a hung node) holds up a USR1 stop: the ranks waiting on it in MPI
// cannot stop. Within --grace-seconds + 10 s the job ends anyway, with 75; the records written are
// whole, and --resume gives every request exactly once.
TEST_F(Distributed, AStalledRankCannotHoldUpAStop) {
  const StalledJob job =
      run_and_stall_the_last_rank("stall", " --grace-seconds 1", /*then_usr1=*/true);
  ASSERT_TRUE(job.ended) << "the job was still running 60 s after the stop signal\n" << job.log;
  std::printf("job ended %.2f s after USR1 with a stalled rank\n", job.seconds);
  ASSERT_TRUE(WIFEXITED(job.status)) << "status " << job.status;
  EXPECT_EQ(WEXITSTATUS(job.status), 75);
  EXPECT_NE(job.log.find("a rank is not answering"), std::string::npos) << job.log;
  expect_resume_gives_every_request_once("stall");
}

// A stalled rank and no stop signal: within --stall-timeout the other rank says what it waits for
// and ends the job with 75 (without it the job would hang to the scheduler's time limit); the
// records written are whole, and --resume gives every request exactly once.
TEST_F(Distributed, AStalledRankEndsTheJobAfterTheStallTimeout) {
  const StalledJob job =
      run_and_stall_the_last_rank("hang", " --stall-timeout 4", /*then_usr1=*/false);
  ASSERT_TRUE(job.ended) << "the job was still running 60 s after a rank stalled\n" << job.log;
  std::printf("job ended %.2f s after a rank stalled (--stall-timeout 4)\n", job.seconds);
  ASSERT_TRUE(WIFEXITED(job.status)) << "status " << job.status;
  EXPECT_EQ(WEXITSTATUS(job.status), 75);
  EXPECT_GE(job.seconds, 3.5) << "it ended before the timeout";
  EXPECT_NE(job.log.find("rank 0 (stage 0, tp rank 0) on "), std::string::npos) << job.log;
  EXPECT_NE(job.log.find("the job ends at --stall-timeout 4 s"), std::string::npos)
      << "no warning at half the timeout\n"
      << job.log;
  EXPECT_NE(job.log.find("waiting for the sampled tokens from the last stage); a rank is hung"),
            std::string::npos)
      << job.log;
  expect_resume_gives_every_request_once("hang");
}

// kill -9 of one rank in the middle of a run: Open MPI's launcher must end the job, non-zero.
TEST_F(Distributed, KilledRankEndsTheJobWithinThirtySeconds) {
  const std::string input = work_ + "/many.txt";
  {
    std::ofstream out(input);
    for (int i = 0; i < 5000; ++i) out << (i % 2 ? "Once upon a time" : "The little dog") << "\n";
  }
  const pid_t launcher = spawn_shell(
      mpirun(4) + binary() + " run --model " + model_ + " --input " + input + " --output " + work_ +
      "/killed.jsonl --tp 2 --pp 2 --max-tokens 200 > " + work_ + "/killed.log 2>&1");
  ASSERT_GT(launcher, 0);
  // Wait until the ranks are computing: the first records appear in the output.
  wait_for_lines(work_ + "/killed.jsonl", 1);
  CommandResult children = run_shell("pgrep -P " + std::to_string(launcher));
  std::istringstream pids(children.output);
  std::vector<pid_t> ranks;
  for (long p; pids >> p;) ranks.push_back(static_cast<pid_t>(p));
  ASSERT_EQ(ranks.size(), 4u) << "expected the 4 rank processes under mpirun:\n" << children.output;
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(ranks.back(), SIGKILL), 0);

  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(launcher, &status, WNOHANG)) == 0 &&
         Clock::now() - killed_at < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (done == 0) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, &status, 0);
    for (pid_t p : ranks) ::kill(p, SIGKILL);
    FAIL() << "the job was still running 30 s after a rank was killed";
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << "exit status " << status;
  EXPECT_LT(seconds, 30.0);
  std::printf("job ended %.2f s after SIGKILL of one rank\n", seconds);
  for (pid_t p : wait_until_gone(ranks, 5)) ADD_FAILURE() << "rank " << p << " left running";
}

}  // namespace
