// Stop signals the way users send them to a job under Open MPI's mpirun: Ctrl-C and SIGTERM to
// mpirun (which sends the ranks SIGTERM, then SIGKILL after odls_base_sigkill_timeout), and a
// stop that reaches the ranks twice, from Slurm and from the launcher, as scancel's does.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "../e2e/cli_util.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

class MpirunStop : public StoriesSuite<MpirunStop> {
 public:
  static constexpr const char* kTag = "mpi_stop";

 protected:
  // N requests of 100 tokens each (ignore_eos: none ends early), so a stop finds 8 running that
  // need many steps more.
  std::string long_requests(const std::string& name, int n) {
    const std::string in = work_ + "/" + name + "_in.jsonl";
    std::ofstream f(in);
    for (int i = 0; i < n; ++i)
      f << json({{"id", i},
                 {"prompt", "Once upon a time " + std::to_string(i)},
                 {"max_tokens", 100},
                 {"ignore_eos", true}})
               .dump()
        << "\n";
    return in;
  }
  static std::string run_command(const std::string& mca, const std::string& in,
                                 const std::string& out) {
    return "mpirun -np 2 --oversubscribe " + mca + " " + binary() + " run --model " + model_ +
           " --input " + in + " --output " + out +
           " --pp 2 --max-seqs 8 --threads 1 --grace-seconds 20 --stats " + out + ".stats";
  }
  // mpirun's children (the ranks), from /proc.
  static std::vector<pid_t> ranks_of(pid_t launcher) {
    std::vector<pid_t> ranks;
    std::istringstream pids(run_shell("pgrep -P " + std::to_string(launcher)).output);
    for (long p; pids >> p;) ranks.push_back(static_cast<pid_t>(p));
    return ranks;
  }
  static bool alive(pid_t pid) {  // not gone and not a zombie
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(stat, text)) return false;
    const size_t close = text.rfind(')');
    return close == std::string::npos || close + 2 >= text.size() ||
           (text[close + 2] != 'Z' && text[close + 2] != 'X');
  }
  // Seconds until every rank is gone (up to `limit`; more: one is still alive).
  static double wait_for_ranks(const std::vector<pid_t>& ranks, double limit) {
    const auto start = Clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    while (seconds() <= limit && std::any_of(ranks.begin(), ranks.end(), alive))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return seconds();
  }
  // --resume completes the output: every id of the n exactly once, every record whole.
  void expect_resume_completes(const std::string& in, const std::string& out, int n) {
    CommandResult r = run_shell(run_command("", in, out) + " --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<int, int> seen;
    for (const json& record : read_jsonl(out)) {
      ++seen[record["id"].get<int>()];
      EXPECT_EQ(record["finish_reason"], "length") << record.dump();
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(n));
    for (const auto& [id, times] : seen) EXPECT_EQ(times, 1) << "id " << id;
  }
};

// Under mpirun rank 0 says once at start-up what SIGTERM / Ctrl-C to mpirun does, and what to send.
TEST_F(MpirunStop, StartUpSaysWhatSigtermToMpirunDoes) {
  const std::string in = long_requests("note", 2);
  CommandResult plain = run_shell(run_command("", in, work_ + "/note.jsonl"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(count_occurrences(plain.output,
                              "a SIGTERM or Ctrl-C to mpirun does not give the graceful stop"),
            1)
      << plain.output;
  EXPECT_NE(plain.output.find("kill -USR1"), std::string::npos) << plain.output;
}

// scancel: Slurm signals every process of the job, the ranks too, and the launcher passes the
// signal on again, milliseconds apart. That is one stop, not a second ("stop now"): the running
// requests finish, every rank exits 75 (so mpirun does), and rank 1's "received signal" line is an
// info line, not a warning.
TEST_F(MpirunStop, AStopThatReachesEachRankTwiceIsOneStop) {
  const std::string in = long_requests("twice", 40);
  const std::string out = work_ + "/twice.jsonl", log = work_ + "/twice.log";
  const pid_t launcher =
      spawn_shell(run_command("", in, out) + " > " + log + " 2>&1", /*new_group=*/true);
  ASSERT_GT(launcher, 0);
  ASSERT_LT(wait_for_lines(out, 16), 40u) << "the job ended before the signal";
  const std::vector<pid_t> ranks = ranks_of(launcher);
  ASSERT_EQ(ranks.size(), 2u);
  for (int twice = 0; twice < 2; ++twice)
    for (pid_t p : ranks) ::kill(p, SIGTERM);
  ProcessExit e = wait_for_exit(launcher, log, std::chrono::seconds(60));
  EXPECT_EQ(e.code, 75) << e.log;
  EXPECT_EQ(e.log.find("a second stop signal"), std::string::npos) << e.log;
  std::ifstream stats_file(out + ".stats");
  const json stats = json::parse(stats_file, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(stats.value("abandoned_requests", -1), 0) << "the running requests were finished\n"
                                                      << e.log;
  EXPECT_NE(e.log.find("[tpllama r1] rank 1 received signal 15; rank 0 decides the stop"),
            std::string::npos)
      << e.log;
  EXPECT_EQ(e.log.find("warning: rank 1 received"), std::string::npos) << e.log;
  expect_resume_completes(in, out, 40);
}

// Ctrl-C (SIGINT to mpirun's process group; the ranks have their own) and SIGTERM to mpirun, with
// Open MPI's defaults: the ranks are ended within seconds, mpirun exits 1, the records written are
// whole and --resume completes the output exactly once.
TEST_F(MpirunStop, CtrlCAndSigtermToMpirunEndTheJobAndResumeCompletes) {
  const std::string in = long_requests("killed", 40);
  for (const auto& [name, ctrl_c] : {std::pair{"sigint", true}, std::pair{"sigterm", false}}) {
    SCOPED_TRACE(name);
    const std::string out = work_ + "/" + name + ".jsonl";
    const pid_t launcher =
        spawn_shell(run_command("", in, out) + " > /dev/null 2>&1", /*new_group=*/true);
    ASSERT_GT(launcher, 0);
    ASSERT_LT(wait_for_lines(out, 16), 40u);
    const std::vector<pid_t> ranks = ranks_of(launcher);
    ctrl_c ? ::kill(-launcher, SIGINT) : ::kill(launcher, SIGTERM);
    ProcessExit e = wait_for_exit(launcher, "/dev/null", std::chrono::seconds(60));
    EXPECT_EQ(e.code, 1) << "mpirun's own status after " << name;
    EXPECT_LT(e.seconds, 15) << "Open MPI kills the ranks 1 s after its SIGTERM";
    EXPECT_LT(wait_for_ranks(ranks, 10), 10);
    expect_resume_completes(in, out, 40);
  }
}

}  // namespace
