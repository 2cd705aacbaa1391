// The tpllama binary under mpirun with several replicas of the model (--dp): every layout of
// replicas gives the records of one replica (greedy, sampled, n samples, structured outputs; prefix
// caching on and off), in input order under --ordered; --stats has one entry per replica; a killed
// job resumes exactly once and a stop signal drains every replica.
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "distributed_fixture.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

struct Replicas {
  int np;
  std::string flags;
  std::string layout;  // what the start-up line says
};

void PrintTo(const Replicas& r, std::ostream* os) {
  *os << "np " << r.np << " " << r.flags;
}

class EveryReplicaLayout : public Distributed, public ::testing::WithParamInterface<Replicas> {};

// The ids of a file's records, in the file's order.
std::vector<int> ids_in_order(const std::string& path) {
  std::vector<int> ids;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) ids.push_back(json::parse(line)["id"].get<int>());
  return ids;
}

TEST_P(EveryReplicaLayout, RecordsAreThoseOfOneReplica) {
  const Replicas p = GetParam();
  for (const char* caching : {"on", "off"}) {
    SCOPED_TRACE(std::string("--prefix-caching ") + caching);
    const std::string out = work_ + "/replicas.jsonl";
    const std::string flags = " " + p.flags + " --prefix-caching " + caching + " --overwrite";
    CommandResult r = run_shell(mpirun(p.np) + binary() + " run --model " + model_ + " --input " +
                                input_ + " --output " + out + flags + " --ordered");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("layout: " + std::to_string(p.np) + " ranks = " + p.layout),
              std::string::npos)
        << r.output;
    expect_same_as_single_rank(out);
    std::vector<int> in_order(references_.size());
    for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = static_cast<int>(i);
    EXPECT_EQ(ids_in_order(out), in_order) << "--ordered writes in input order";

    // Seeded sampling, penalties, n samples and constrained requests: the same records, whichever
    // replica ran them.
    const std::string sampled_out = work_ + "/replicas_sampled.jsonl";
    CommandResult s = run_shell(mpirun(p.np) + binary() + " run --model " + model_ + " --input " +
                                sampled_input_ + " --output " + sampled_out + flags);
    ASSERT_EQ(s.exit_code, 0) << s.output;
    EXPECT_EQ(lines_by_id(sampled_out), lines_by_id(work_ + "/single_sampled.jsonl"));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, EveryReplicaLayout,
                         ::testing::Values(Replicas{2, "--dp 2", "dp 2 x tp 1 x pp 1"},
                                           Replicas{3, "--dp 3", "dp 3 x tp 1 x pp 1"},
                                           Replicas{4, "--dp 2 --tp 2", "dp 2 x tp 2 x pp 1"},
                                           Replicas{4, "--dp 2 --pp 2", "dp 2 x tp 1 x pp 2"},
                                           Replicas{4, "--tp 2 --pp 1", "dp 2 x tp 2 x pp 1"}),
                         [](const auto& param_info) {
                           return "np" + std::to_string(param_info.param.np) + "_" +
                                  std::to_string(param_info.index);
                         });

// --stats: the totals, and each replica's share of them.
TEST_F(Distributed, StatsHaveOneEntryPerReplica) {
  const std::string in = work_ + "/stats_in.txt", stats = work_ + "/replica_stats.json";
  {
    std::ofstream f(in);
    for (int i = 0; i < 60; ++i) f << "Once upon a time " << i << "\n";
  }
  CommandResult r = run_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " + in +
                              " --output " + work_ + "/stats_out.jsonl --dp 2 --max-tokens 6" +
                              " --max-seqs 4 --stats " + stats);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(stats);
  const json j = json::parse(f);
  EXPECT_EQ(j["layout"]["dp"], 2);
  EXPECT_EQ(j["requests"], 60);
  ASSERT_EQ(j["replicas"].size(), 2u) << j.dump();
  long long requests = 0, generated = 0;
  for (const json& replica : j["replicas"]) {
    requests += replica["requests"].get<long long>();
    generated += replica["generated_tokens"].get<long long>();
    EXPECT_GT(replica["requests"].get<long long>(), 0) << "a replica was given no work";
  }
  EXPECT_EQ(requests, 60);
  EXPECT_EQ(generated, j["generated_tokens"].get<long long>());
  EXPECT_EQ(j["replicas"][1]["leader_rank"], 1);
}

// kill -9 of the whole job at dp 2 x tp 2, then --resume: every id once, each record the one
// replica's (two seeded samples of its prompt).
TEST_F(Distributed, KilledReplicasResumeExactlyOnce) {
  const std::string in = work_ + "/dp_job_in.txt";
  {
    std::ofstream f(in);
    for (int i = 0; i < 1500; ++i)
      f << (i % 2 ? "Once upon a time " : "The little dog ") << i % 89 << "\n";
  }
  const std::string flags = " --max-tokens 8 --max-seqs 16 --n 2 --temperature 0.8";
  const std::string full = work_ + "/dp_job_full.jsonl", out = work_ + "/dp_job.jsonl";
  ASSERT_EQ(run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + full +
                      flags)
                .exit_code,
            0);
  const std::string job_cmd = mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                              " --output " + out + flags + " --dp 2 --tp 2";
  const pid_t job = spawn_shell(job_cmd + " > /dev/null 2>&1", /*new_group=*/true);
  ASSERT_GT(job, 0);
  const size_t lines = wait_for_lines(out, 400);
  kill_whole_job(job);
  ASSERT_LT(lines, 1500u) << "the job finished before it could be killed";
  CommandResult r = run_shell(job_cmd + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<int, int> count;
  for (int id : ids_in_order(out)) ++count[id];
  EXPECT_EQ(count.size(), 1500u);
  for (const auto& [id, n] : count) EXPECT_EQ(n, 1) << "id " << id;
  EXPECT_EQ(lines_by_id(out), lines_by_id(full));
}

// SIGUSR1 to mpirun: every replica drains (status 75), and --resume completes the output exactly
// once, in input order under --ordered.
TEST_F(Distributed, SigusrOneDrainsEveryReplica) {
  const std::string flags = " --dp 2 --max-tokens 12 --ordered";
  const std::string in = numbered_prompts_and_full_run("dp_usr1", 2, flags);
  const std::string out = work_ + "/dp_usr1.jsonl", full = work_ + "/dp_usr1_full.jsonl";
  const pid_t job = spawn_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " + in +
                                " --output " + out + flags + " > /dev/null 2>&1");
  ASSERT_GT(job, 0);
  stop_with_usr1(job, out);
  CommandResult r = run_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " + in +
                              " --output " + out + flags + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_by_id(out), lines_by_id(full));
  std::vector<int> in_order(3000);
  for (int i = 0; i < 3000; ++i) in_order[static_cast<size_t>(i)] = i + 1;
  EXPECT_EQ(ids_in_order(out), in_order);
}

}  // namespace
