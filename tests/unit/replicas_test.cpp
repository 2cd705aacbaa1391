// Rank 0's dispatcher and the replicas' links (session/replicas), their ranks threads over the
// in-memory communicator: every request answered once, in input order under --ordered, refusals
// made where the gate made them, and a slower replica given fewer requests.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "session/replicas.h"
#include "unit/replica_threads.h"

namespace tpllama {
namespace {

using nlohmann::json;

struct Job {
  std::vector<json> records;  // the output, in its order
  std::vector<long long> per_replica;
};

// `replicas` leaders, each answering a request after `delay(replica)`, over `input`'s lines.
Job run_job(const std::string& input, int replicas, bool ordered,
            std::chrono::microseconds (*delay)(int)) {
  const std::string path =
      testing::TempDir() + "replicas_test_" + std::to_string(::getpid()) + ".jsonl";
  std::istringstream in(input);
  PromptReader reader(in, InputFormat::kJsonl, RequestDefaults{}, "in.jsonl");
  reader.keep_lines(true);
  RunSummary summary;
  {
    ResultWriter writer(path);
    DispatchIo io;
    io.reader = &reader;
    io.writer = &writer;
    io.context = 64;
    io.ordered = ordered;
    io.log_interval = 1e9;
    const testing_util::ThreadedReplicas run = testing_util::run_replicas_in_threads(
        io, replicas, /*batch=*/2, [&](int replica, const GatedRequest& g) {
          std::this_thread::sleep_for(delay(replica));
          Result r;
          r.id = g.request.id;
          r.line = g.request.line;
          if (g.refusal) {
            r.finish_reason = "error";
            r.error = *g.refusal;
          } else {
            r.text = g.request.prompt;  // the line the leader parsed
            r.finish_reason = "length";
          }
          return r;
        });
    for (const std::string& e : run.errors) EXPECT_EQ(e, "");
    summary = run.summary;
  }
  Job job;
  std::ifstream out(path);
  for (std::string line; std::getline(out, line);) job.records.push_back(json::parse(line));
  for (const ReplicaFigures& f : summary.replicas) job.per_replica.push_back(f.records);
  std::filesystem::remove(path);
  return job;
}

// Request i's prompt (a stream: GCC 12 warns falsely on a concatenated short string).
std::string prompt_of(int i) {
  std::ostringstream p;
  p << "p" << i;
  return p.str();
}

std::string numbered(int n) {
  std::ostringstream in;
  for (int i = 0; i < n; ++i) in << json({{"id", i}, {"prompt", prompt_of(i)}}) << "\n";
  return in.str();
}

std::chrono::microseconds no_delay(int) {
  return std::chrono::microseconds(0);
}

TEST(Replicas, EveryRequestOnceInInputOrderUnderOrdered) {
  const Job job = run_job(numbered(300), 3, /*ordered=*/true, no_delay);
  ASSERT_EQ(job.records.size(), 300u);
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(job.records[static_cast<size_t>(i)]["id"], i);
    EXPECT_EQ(job.records[static_cast<size_t>(i)]["text"], prompt_of(i))
        << "the leader reads the line as rank 0 read it";
  }
  ASSERT_EQ(job.per_replica.size(), 3u);
  EXPECT_EQ(job.per_replica[0] + job.per_replica[1] + job.per_replica[2], 300);
}

// The gate's refusals (a line that is no JSON, a repeated id) become the records rank 0 would
// write with one replica, wherever they are handed.
TEST(Replicas, TheGatesRefusalsReachTheirRecords) {
  const std::string input =
      numbered(5) + "not json\n" + json({{"id", 2}, {"prompt", "again"}}).dump() + "\n";
  const Job job = run_job(input, 2, /*ordered=*/true, no_delay);
  ASSERT_EQ(job.records.size(), 7u);
  EXPECT_EQ(job.records[5]["finish_reason"], "error");
  EXPECT_NE(job.records[5]["error"].get<std::string>().find("line 6"), std::string::npos)
      << job.records[5];
  EXPECT_EQ(job.records[6]["finish_reason"], "error");
  EXPECT_NE(job.records[6]["error"].get<std::string>().find("duplicate id 2 (first on line 3)"),
            std::string::npos)
      << job.records[6];
}

std::chrono::microseconds replica_one_slow(int replica) {
  return std::chrono::microseconds(replica == 1 ? 4000 : 200);
}

// Requests are pulled: a replica 20 times slower takes far fewer than an even share.
TEST(Replicas, ASlowerReplicaTakesFewerRequests) {
  const Job job = run_job(numbered(400), 2, /*ordered=*/false, replica_one_slow);
  ASSERT_EQ(job.records.size(), 400u);
  ASSERT_EQ(job.per_replica.size(), 2u);
  EXPECT_LT(job.per_replica[1], 100) << "replica 1 took " << job.per_replica[1] << " of 400";
  std::map<int, int> seen;
  for (const json& r : job.records) ++seen[r["id"].get<int>()];
  EXPECT_EQ(seen.size(), 400u);
}

}  // namespace
}  // namespace tpllama
