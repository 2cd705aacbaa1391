// Stop signals the way users send them to a job under Open MPI's mpirun: Ctrl-C and SIGTERM to
// mpirun (which sends the ranks SIGTERM, then SIGKILL after odls_base_sigkill_timeout), and a
// stop that reaches the ranks twice, from Slurm and from mpirun, as scancel's does.
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
  static std::string run_command(const std::string& mca, const std::string& in, const std::string& out) {
    return "mpirun -np 2 --oversubscribe " + mca + " " + binary() + " run --model " + model_ + " --input " + in +
           " --output " + out + " --pp 2 --max-seqs 8 --threads 1 --grace-seconds 20 --stats " + out + ".stats";
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
    return close == std::string::npos || close + 2 >= text.size() || (text[close + 2] != 'Z' && text[close + 2] != 'X');
  }
  // Seconds until every rank is gone (up to `limit`; more: one is still alive).
  static double wait_for_ranks(const std::vector<pid_t>& ranks, double limit) {
    const auto start = Clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    while (seconds() <= limit && std::any_of(ranks.begin(), ranks.end(), alive))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return seconds();
  }
  static std::string slurp(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
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

  // Runs a job with `mca`, signals it once 16 records are written (`signal_job` gets mpirun's pid
  // and the ranks), and waits for the ranks to end. Returns the job's log; mpirun itself is killed.
  struct Stopped {
    std::string log;
    json stats;
    double ranks_gone_seconds = 0;
    size_t written_at_signal = 0;
  };
  Stopped stop_job(const std::string& name, const std::string& in, const std::string& mca,
                   const std::function<void(pid_t, const std::vector<pid_t>&)>& signal_job) {
    Stopped s;
    const std::string out = work_ + "/" + name + ".jsonl", log = work_ + "/" + name + ".log";
    const pid_t launcher = spawn_shell(run_command(mca, in, out) + " > " + log + " 2>&1", /*new_group=*/true);
    EXPECT_GT(launcher, 0);
    if (launcher <= 0) return s;
    s.written_at_signal = wait_for_lines(out, 16);
    const std::vector<pid_t> ranks = ranks_of(launcher);
    EXPECT_EQ(ranks.size(), 2u);
    signal_job(launcher, ranks);
    s.ranks_gone_seconds = wait_for_ranks(ranks, 60);
    ::kill(-launcher, SIGKILL);  // mpirun waits out its SIGKILL timeout twice after the ranks are gone
    ::waitpid(launcher, nullptr, 0);
    for (pid_t p : ranks) ::kill(p, SIGKILL);
    s.log = slurp(log);
    std::ifstream stats(out + ".stats");
    if (stats) s.stats = json::parse(stats, nullptr, /*allow_exceptions=*/false);
    return s;
  }
};

// Open MPI's default odls_base_sigkill_timeout (1 s) kills the ranks before a graceful stop: rank 0
// says so once at start-up, with what to do; a timeout covering --grace-seconds + 10 s silences it.
TEST_F(MpirunStop, StartUpSaysWhatSigtermToMpirunDoes) {
  const std::string in = long_requests("note", 2);
  CommandResult plain = run_shell(run_command("", in, work_ + "/note.jsonl"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(count_occurrences(plain.output, "a SIGTERM or Ctrl-C to mpirun kills the ranks 1 s later"), 1)
      << plain.output;
  EXPECT_NE(plain.output.find("kill -USR1"), std::string::npos) << plain.output;
  CommandResult longer = run_shell(run_command("--mca odls_base_sigkill_timeout 30", in, work_ + "/note2.jsonl"));
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_EQ(longer.output.find("to mpirun kills the ranks"), std::string::npos) << longer.output;
}

// Ctrl-C (SIGINT to mpirun's process group; the ranks have their own) and SIGTERM to mpirun, with
// odls_base_sigkill_timeout 30 (>= --grace-seconds 20 + 10): the ranks get SIGTERM, finish the
// running requests and stop; rank 1's "received signal" line is an info line, not a warning.
TEST_F(MpirunStop, CtrlCAndSigtermToMpirunFinishTheRunningRequestsGivenTheSigkillTimeout) {
  const std::string in = long_requests("term", 40);
  for (const auto& [name, ctrl_c] : {std::pair{"sigint", true}, std::pair{"sigterm", false}}) {
    SCOPED_TRACE(name);
    Stopped s = stop_job(name, in, "--mca odls_base_sigkill_timeout 30", [ctrl_c = ctrl_c](pid_t mpirun, auto&) {
      ctrl_c ? ::kill(-mpirun, SIGINT) : ::kill(mpirun, SIGTERM);
    });
    ASSERT_LT(s.written_at_signal, 40u) << "the job ended before the signal";
    EXPECT_LT(s.ranks_gone_seconds, 40) << s.log;
    EXPECT_NE(s.log.find("stopped early"), std::string::npos) << s.log;
    EXPECT_EQ(s.stats.value("stopped_by_signal", 0), SIGTERM) << s.stats.dump() << s.log;  // mpirun sends SIGTERM
    EXPECT_EQ(s.stats.value("abandoned_requests", -1), 0) << "the running requests were finished\n" << s.log;
    EXPECT_NE(s.log.find("[tpllama r1] rank 1 received signal 15; rank 0 decides the stop"), std::string::npos)
        << s.log;
    EXPECT_EQ(s.log.find("warning: rank 1 received"), std::string::npos) << s.log;
    expect_resume_completes(in, work_ + "/" + name + ".jsonl", 40);
  }
}

// scancel under mpirun: Slurm sends SIGTERM to every process of the job, the ranks too, and mpirun
// sends them SIGTERM again, milliseconds apart. That is one stop, not a second ("stop now").
TEST_F(MpirunStop, AStopSentToTheRanksAndToMpirunAsScancelDoesIsOneStop) {
  const std::string in = long_requests("twice", 40);
  Stopped s = stop_job("twice", in, "--mca odls_base_sigkill_timeout 30", [](pid_t mpirun, auto& ranks) {
    for (pid_t p : ranks) ::kill(p, SIGTERM);
    ::kill(mpirun, SIGTERM);
  });
  ASSERT_LT(s.written_at_signal, 40u) << "the job ended before the signal";
  EXPECT_EQ(s.log.find("a second stop signal"), std::string::npos) << s.log;
  EXPECT_EQ(s.stats.value("abandoned_requests", -1), 0) << "the running requests were finished\n" << s.log;
  expect_resume_completes(in, work_ + "/twice.jsonl", 40);
}

// SIGTERM to mpirun with Open MPI's defaults: the ranks are killed within seconds, mpirun exits 1,
// the records written are whole and --resume completes the output exactly once.
TEST_F(MpirunStop, SigtermToMpirunByDefaultKillsTheRanksAndResumeCompletes) {
  const std::string in = long_requests("killed", 40);
  const std::string out = work_ + "/killed.jsonl";
  const pid_t launcher = spawn_shell(run_command("", in, out) + " > /dev/null 2>&1", /*new_group=*/true);
  ASSERT_GT(launcher, 0);
  ASSERT_LT(wait_for_lines(out, 16), 40u);
  const std::vector<pid_t> ranks = ranks_of(launcher);
  ::kill(launcher, SIGTERM);
  ProcessExit e = wait_for_exit(launcher, "/dev/null", std::chrono::seconds(60));
  EXPECT_EQ(e.code, 1) << "mpirun's own status after SIGTERM";
  EXPECT_LT(e.seconds, 15) << "Open MPI kills the ranks 1 s after its SIGTERM";
  EXPECT_LT(wait_for_ranks(ranks, 10), 10);
  expect_resume_completes(in, out, 40);
}

}  // namespace
