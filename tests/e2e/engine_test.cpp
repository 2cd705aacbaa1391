// The batch engine end to end on stories260K: scheduling never changes greedy output (batch
// limits, block sizes, preemption), kill -9 then --resume gives every id exactly once with the
// uninterrupted text, OpenAI batch round trip, --ordered, duplicate ids, logprobs against the
// shipped run.c logits, and the --stats / --trace files.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "cli_util.h"
#include "core/stop_signal.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

class Engine : public StoriesSuite<Engine> {
 public:
  static constexpr const char* kTag = "engine";

 protected:
  // n requests over a few prompts, with long enough completions to fill the KV cache.
  static std::string mixed_input(const std::string& name, int n, int max_tokens) {
    const char* prompts[] = {"Once upon a time", "The little dog", "She said, \"Hello!\"", "",
                             "Tom and Lily",     "One day"};
    std::string path = work_ + "/" + name + "_in.jsonl";
    std::ofstream out(path);
    for (int i = 0; i < n; ++i)
      out << json({{"id", i}, {"prompt", prompts[i % 6]}, {"max_tokens", max_tokens + i % 7}})
                 .dump()
          << "\n";
    return path;
  }

  CommandResult run(const std::string& input, const std::string& output,
                    const std::string& flags = "") {
    return run_shell(binary() + " run --model " + model_ + " --input " + input + " --output " +
                     output + " " + flags);
  }

  // Starts a run in the background (flags may redirect its output), sends SIGTERM once 50 records
  // are out, and returns its wait status.
  int run_until_sigterm(const std::string& input, const std::string& output,
                        const std::string& flags) {
    const pid_t pid = spawn_shell(binary() + " run --model " + model_ + " --input " + input +
                                  " --output " + output + flags);
    EXPECT_GT(pid, 0);
    if (pid <= 0) return -1;
    wait_for_lines(output, 50);
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }

  static std::map<std::string, std::string> text_by_id(const std::string& path) {
    std::map<std::string, std::string> m;
    for (const json& r : read_jsonl(path)) m[r["id"].dump()] = r.dump();
    return m;
  }
};

TEST_F(Engine, GreedyOutputDoesNotDependOnSchedulingOrCacheSize) {
  const std::string in = mixed_input("sched", 24, 120);
  const std::string base = work_ + "/sched_base.jsonl";
  const CommandResult first = run(in, base);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // --kv-block-size's default on a CPU: 64 positions (the model's context, 512, is larger).
  EXPECT_NE(first.output.find(" blocks of 64 tokens"), std::string::npos) << first.output;
  const auto expected = text_by_id(base);
  ASSERT_EQ(expected.size(), 24u);
  for (const std::string& flags :
       std::vector<std::string>{"--max-seqs 1", "--max-seqs 3 --max-batch-tokens 16",
                                "--max-seqs 64 --max-batch-tokens 4096", "--kv-block-size 1",
                                "--kv-block-size 7 --max-batch-tokens 5", "--kv-block-size 16",
                                "--kv-cache-memory 700KB --stats " + work_ + "/sched_stats.json"}) {
    SCOPED_TRACE(flags);
    const std::string out = work_ + "/sched.jsonl";
    CommandResult r = run(in, out, flags + " --overwrite");  // one file for each schedule
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(text_by_id(out), expected);
  }
  json stats;
  std::ifstream(work_ + "/sched_stats.json") >> stats;
  EXPECT_GT(stats["preemptions"].get<int>(), 0)
      << "a cache of 8 blocks of 64 (one full context) for 24 sequences must preempt";
}

// kill -9 at several points, then --resume: every id exactly once, texts as uninterrupted.
TEST_F(Engine, KillNineThenResumeGivesEveryIdExactlyOnce) {
  const std::string in = work_ + "/resume_in.txt";
  {
    std::ofstream out(in);
    const char* prompts[] = {"Once upon a time", "The little dog", "Tom and Lily", "One day"};
    for (int i = 0; i < 3000; ++i) out << prompts[i % 4] << " " << i % 97 << "\n";
  }
  const std::string flags = " --max-tokens 8 --max-seqs 16 --threads 1";
  const std::string full = work_ + "/resume_full.jsonl";
  ASSERT_EQ(run(in, full, flags).exit_code, 0);
  const auto expected = text_by_id(full);
  ASSERT_EQ(expected.size(), 3000u);

  for (size_t kill_after :
       {1u, 900u, 1500u}) {  // half the run is left at the last: a fast machine can't finish first
    SCOPED_TRACE("killed after " + std::to_string(kill_after) + " records");
    const std::string out = work_ + "/resume_" + std::to_string(kill_after) + ".jsonl";
    const pid_t pid = spawn_shell(binary() + " run --model " + model_ + " --input " + in +
                                  " --output " + out + flags + " > /dev/null 2>&1");
    ASSERT_GT(pid, 0);
    const size_t lines = wait_for_lines(out, kill_after);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ASSERT_LT(lines, 3000u) << "the run finished before it could be killed";
    CommandResult r = run(in, out, flags + " --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, int> count;
    for (const json& rec : read_jsonl(out)) ++count[rec["id"].dump()];
    EXPECT_EQ(count.size(), 3000u);
    for (const auto& [id, n] : count) EXPECT_EQ(n, 1) << "id " << id;
    EXPECT_EQ(text_by_id(out), expected);
  }
}

TEST_F(Engine, ASecondRunOnTheSameOutputIsRefusedWhileTheFirstWrites) {
  const std::string in = mixed_input("locked", 600, 60);
  const std::string out = work_ + "/locked.jsonl";
  const pid_t first = spawn_shell(binary() + " run --model " + model_ + " --input " + in +
                                  " --output " + out + " --threads 1 > /dev/null 2>&1");
  ASSERT_GT(first, 0);
  wait_for_lines(out, 1);
  // Stopped, the first run holds its lock however fast the machine would have finished it.
  ASSERT_EQ(::kill(first, SIGSTOP), 0);
  ASSERT_EQ(::waitpid(first, nullptr, WNOHANG), 0)
      << "the first run ended before the second could start";
  CommandResult second = run(in, out, "--resume");
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.output.find("is locked by another tpllama process"), std::string::npos)
      << second.output;
}

// SIGTERM: no new requests, the running ones finish, exit status 75, and --resume completes the
// rest exactly once.
TEST_F(Engine, SigtermStopsGracefullyAndResumeFinishes) {
  const std::string in = mixed_input("sigterm", 3000, 20);
  const std::string out = work_ + "/sigterm.jsonl", full = work_ + "/sigterm_full.jsonl";
  const std::string flags = " --threads 1 --max-seqs 16";
  ASSERT_EQ(run(in, full, flags).exit_code, 0);
  const int status =
      run_until_sigterm(in, out, flags + " --grace-seconds 20 > " + work_ + "/sigterm.log 2>&1");
  ASSERT_TRUE(WIFEXITED(status)) << "killed instead of stopping: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 75);
  const size_t written = count_lines(out);
  EXPECT_LT(written, 3000u);
  std::ifstream log(work_ + "/sigterm.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_NE(text.str().find("stopped early"), std::string::npos) << text.str();
  for (const json& r : read_jsonl(out))
    EXPECT_NE(r["finish_reason"], "error") << "every record is complete";
  CommandResult r = run(in, out, flags + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(text_by_id(out), text_by_id(full));
  EXPECT_EQ(read_jsonl(out).size(), 3000u);
}

// A second stop signal stops at once instead of waiting out --grace-seconds for the running
// requests; what finished is intact and --resume completes the rest.
TEST_F(Engine, ASecondSignalStopsAtOnce) {
  const std::string in = work_ + "/second_signal_in.jsonl";
  {
    std::ofstream f(in);
    // The first ten are short, so when they are written 54 long ones are still running (equal
    // lengths finish together, and a signal between two batches finds nothing running): 64 at a
    // time make each step slow enough that they still run when the second signal comes.
    for (int i = 0; i < 100; ++i)
      f << json({{"id", i},
                 {"prompt", "Once upon a time"},
                 {"max_tokens", i < 10 ? 20 : 480},
                 {"ignore_eos", true}})
               .dump()
        << "\n";
  }
  const std::string out = work_ + "/second_signal.jsonl", log_path = work_ + "/second_signal.log";
  const pid_t pid =
      spawn_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + out +
                  " --threads 1 --max-seqs 64 --grace-seconds 600 > " + log_path + " 2>&1");
  ASSERT_GT(pid, 0);
  wait_for_lines(out, 10);
  ::kill(pid, SIGTERM);
  // Past the window within which a second signal is the same stop relayed (Slurm, then mpirun);
  // the running ones need 460 steps more.
  std::this_thread::sleep_for(std::chrono::duration<double>(tpllama::kRelayWindowSeconds + 0.3));
  const auto second = Clock::now();
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double waited = std::chrono::duration<double>(Clock::now() - second).count();
  std::ifstream log(log_path);
  std::stringstream text;
  text << log.rdbuf();
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << text.str();
  EXPECT_EQ(WEXITSTATUS(status), 75) << text.str();
  EXPECT_LT(waited, 60.0) << "it waited for the running requests";
  EXPECT_NE(text.str().find("a second stop signal: stopping now"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("(0 unfinished requests abandoned)"), std::string::npos) << text.str();
  for (const json& r : read_jsonl(out))
    EXPECT_NE(r["finish_reason"], "error") << "every record is complete";
  CommandResult r = run(in, out, " --threads 1 --max-seqs 64 --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_jsonl(out).size(), 100u);
}

// --ordered, stopped with no grace: the results held behind the abandoned requests are not
// written (so the output stays in input order after --resume), and --stats counts the records
// that were written, not those that finished.
TEST_F(Engine, OrderedStopCountsWhatWasWrittenAndResumeKeepsTheOrder) {
  // Every 16th request is long: the short ones after it finish first and wait behind it, so a stop
  // always finds results held back.
  const std::string in = work_ + "/ordered_stop_in.jsonl";
  {
    std::ofstream f(in);
    for (int i = 0; i < 800; ++i)
      f << json({{"id", i}, {"prompt", "Once upon a time"}, {"max_tokens", i % 16 == 0 ? 300 : 3}})
               .dump()
        << "\n";
  }
  const std::string out = work_ + "/ordered_stop.jsonl", full = work_ + "/ordered_stop_full.jsonl";
  const std::string stats = work_ + "/ordered_stop.json",
                    flags = " --threads 1 --max-seqs 16 --ordered";
  ASSERT_EQ(run(in, full, flags).exit_code, 0);
  const int status = run_until_sigterm(
      in, out, flags + " --grace-seconds 0 --stats " + stats + " > /dev/null 2>&1");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 75) << "status " << status;
  json st;
  std::ifstream(stats) >> st;
  const std::vector<json> written = read_jsonl(out);
  EXPECT_EQ(st["requests"].get<size_t>(), written.size());
  EXPECT_EQ(st["requests"].get<long long>(),
            st["finished_stop"].get<long long>() + st["finished_length"].get<long long>() +
                st["scored"].get<long long>() + st["errors"].get<long long>());
  EXPECT_GT(st["abandoned_requests"].get<long long>(), 0);
  EXPECT_GT(st["unwritten_ordered_results"].get<long long>(), 0)
      << "the stop found no result held back";
  EXPECT_EQ(st["stopped_by_signal"].get<int>(), SIGTERM);
  CommandResult r = run(in, out, flags + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> resumed = read_jsonl(out), want = read_jsonl(full);
  ASSERT_EQ(resumed.size(), 800u);
  for (size_t i = 0; i < resumed.size(); ++i) ASSERT_EQ(resumed[i], want[i]) << "record " << i;
}

TEST_F(Engine, ResumeCutsATornLastLine) {
  const std::string in = mixed_input("torn", 6, 20);
  const std::string full = work_ + "/torn_full.jsonl", out = work_ + "/torn.jsonl";
  ASSERT_EQ(run(in, full).exit_code, 0);
  std::vector<json> records = read_jsonl(full);
  {
    std::ofstream partial(out);
    partial << records[0].dump() << "\n"
            << records[1].dump() << "\n"
            << records[2].dump().substr(0, 17);
  }
  CommandResult r = run(in, out, "--resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("torn last line of 17 bytes"), std::string::npos) << r.output;
  EXPECT_EQ(text_by_id(out), text_by_id(full));
  EXPECT_EQ(read_jsonl(out).size(), 6u);
}

// --resume onto the output of another job: its records are kept, and the run says how many of them
// no request of this input matched (none when the input is the job's own).
TEST_F(Engine, ResumeOntoAnotherJobsOutputSaysSo) {
  const std::string a = work_ + "/job_a.jsonl", b = work_ + "/job_b.jsonl",
                    out = work_ + "/job_out.jsonl";
  std::ofstream(a) << R"({"id": "a1", "prompt": "Once upon a time", "max_tokens": 2})"
                   << "\n"
                   << R"({"id": "a2", "prompt": "The little dog", "max_tokens": 2})"
                   << "\n";
  std::ofstream(b) << R"({"id": "b1", "prompt": "One day", "max_tokens": 2})"
                   << "\n";
  ASSERT_EQ(run(a, out).exit_code, 0);
  CommandResult r = run(a, out, "--resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("match no request"), std::string::npos) << r.output;
  r = run(b, out, "--resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 records already in " + out + " match no request of " + b),
            std::string::npos)
      << r.output;
  EXPECT_EQ(read_jsonl(out).size(), 3u);
}

// --resume with another prompt file of the same ids (a text file's are its line numbers): the
// run stops before any work, naming the record and the line that disagree, and leaves the output
// as it was. The same file resumes; a prompt edited since the record was made is refused too.
TEST_F(Engine, ResumeWithAnotherInputOfTheSameIdsIsRefused) {
  const std::string a = work_ + "/ids_a.txt", b = work_ + "/ids_b.txt",
                    out = work_ + "/ids_out.jsonl";
  std::ofstream(a) << "Once upon a time\nThe little dog\nOne day\n";
  std::ofstream(b) << "Tom and Lily went to the park to play\nShe said\nThe cat sat\n";
  ASSERT_EQ(run(a, out, "--max-tokens 3").exit_code, 0);
  std::vector<json> records = read_jsonl(out);
  ASSERT_EQ(records.size(), 3u);
  {
    std::ofstream cut(out);  // as if killed after two records
    cut << records[0].dump() << "\n" << records[1].dump() << "\n";
  }
  const std::string before = [&] {
    std::ifstream f(out);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }();
  CommandResult r = run(b, out, "--max-tokens 3 --resume");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--resume: line 1 of " + out + " answers id 1 for a " +
                          std::to_string(records[0]["prompt_tokens"].get<int>()) + "-token prompt"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("another input"), std::string::npos) << r.output;
  std::ifstream f(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()),
            before);

  r = run(a, out, "--max-tokens 3 --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<json> resumed = read_jsonl(out);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(resumed[i]["text"], records[i]["text"]) << "record " << i;
}

TEST_F(Engine, DuplicateIdsAreErrorRecords) {
  const std::string in = work_ + "/dup.jsonl";
  std::ofstream(in) << R"({"id": "a", "prompt": "Once upon a time", "max_tokens": 4})"
                    << "\n"
                    << R"({"id": "b", "prompt": "The little dog", "max_tokens": 4})"
                    << "\n"
                    << R"({"id": "a", "prompt": "One day", "max_tokens": 4})"
                    << "\n";
  const std::string out = work_ + "/dup_out.jsonl";
  CommandResult r = run(in, out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<json> records = read_jsonl(out);
  ASSERT_EQ(records.size(), 3u);
  int errors = 0;
  for (const json& rec : records)
    if (rec["finish_reason"] == "error") {
      ++errors;
      EXPECT_EQ(rec["id"], "a");
      EXPECT_NE(rec["error"].get<std::string>().find("first on line 1"), std::string::npos)
          << rec.dump();
    }
  EXPECT_EQ(errors, 1);
}

// Error records are keyed by input line, so a resumed run neither repeats a duplicate's error nor
// drops the first occurrence, and an unparseable line's made-up id collides with nothing.
TEST_F(Engine, ResumeAfterDuplicateAndMalformedLinesIsExact) {
  const std::string in = work_ + "/dup_resume.jsonl";
  std::ofstream(in) << R"({"id": "a", "prompt": "Once upon a time", "max_tokens": 50})"
                    << "\n"
                    << R"({"id": "a", "prompt": "The cat"})"
                    << "\n"
                    << R"({"id": "b", "prompt": "The dog", "max_tokens": 40})"
                    << "\n"
                    << "garbage\n"
                    << R"({"id": 4, "prompt": "One day", "max_tokens": 3})"
                    << "\n";
  const std::string full = work_ + "/dup_resume_full.jsonl", cut = work_ + "/dup_resume_cut.jsonl";
  ASSERT_EQ(run(in, full).exit_code, 0);
  std::vector<json> records = read_jsonl(full);
  ASSERT_EQ(records.size(), 5u);
  int errors = 0;
  for (const json& r : records) errors += r["finish_reason"] == "error" ? 1 : 0;
  EXPECT_EQ(errors, 2)
      << "the duplicate and the unparseable line; id 4 is not a duplicate of line 4's made-up id";
  for (size_t keep = 1; keep < records.size(); ++keep) {
    {
      std::ofstream f(cut);
      for (size_t i = 0; i < keep; ++i) f << records[i].dump() << "\n";
    }
    CommandResult r = run(in, cut, "--resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::multiset<std::string> want, got;
    for (const json& rec : records) want.insert(rec.dump());
    for (const json& rec : read_jsonl(cut)) got.insert(rec.dump());
    EXPECT_EQ(got, want) << "resumed after " << keep << " records";
  }
}

TEST_F(Engine, OrderedWritesInInputOrder) {
  const std::string in = mixed_input("ordered", 40, 30);
  const std::string out = work_ + "/ordered.jsonl", unordered = work_ + "/unordered.jsonl";
  ASSERT_EQ(run(in, out, "--ordered --max-seqs 8").exit_code, 0);
  ASSERT_EQ(run(in, unordered, "--max-seqs 8").exit_code, 0);
  std::vector<json> records = read_jsonl(out);
  ASSERT_EQ(records.size(), 40u);
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(records[i]["id"], static_cast<int>(i));
  std::vector<json> finish_order = read_jsonl(unordered);
  bool differs = false;
  for (size_t i = 0; i < finish_order.size(); ++i)
    differs = differs || finish_order[i]["id"] != static_cast<int>(i);
  EXPECT_TRUE(differs)
      << "the default (completion order) should differ from input order on this input";
  EXPECT_EQ(text_by_id(out), text_by_id(unordered));
}

TEST_F(Engine, OpenAiBatchRoundTrip) {
  const std::string in = work_ + "/batch.jsonl";
  {
    std::ofstream f(in);
    f << json({{"custom_id", "req-1"},
               {"method", "POST"},
               {"url", "/v1/completions"},
               {"body",
                {{"model", "stories"},
                 {"prompt", "Once upon a time"},
                 {"max_tokens", 12},
                 {"temperature", 0}}}})
             .dump()
      << "\n";
    f << json({{"custom_id", "req-2"},
               {"method", "POST"},
               {"url", "/v1/chat/completions"},
               {"body", {{"messages", json::array()}}}})
             .dump()
      << "\n";
  }
  const std::string out = work_ + "/batch_out.jsonl";
  CommandResult r = run(in, out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, json> by_custom;
  for (const json& rec : read_jsonl(out)) by_custom[rec["custom_id"]] = rec;
  ASSERT_EQ(by_custom.size(), 2u);
  const json& ok = by_custom["req-1"];
  EXPECT_EQ(ok["response"]["status_code"], 200);
  EXPECT_EQ(ok["error"], nullptr);
  const json& body = ok["response"]["body"];
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  EXPECT_EQ(body["usage"]["total_tokens"], body["usage"]["prompt_tokens"].get<int>() + 12);
  // The same text as the JSONL path gives for the same request.
  const std::string jsonl_in = work_ + "/batch_same.jsonl",
                    jsonl_out = work_ + "/batch_same_out.jsonl";
  std::ofstream(jsonl_in) << R"({"id": 1, "prompt": "Once upon a time", "max_tokens": 12})"
                          << "\n";
  ASSERT_EQ(run(jsonl_in, jsonl_out).exit_code, 0);
  EXPECT_EQ(body["choices"][0]["text"], read_jsonl(jsonl_out)[0]["text"]);
  const json& bad = by_custom["req-2"];
  EXPECT_EQ(bad["response"]["status_code"], 400);
  EXPECT_EQ(bad["error"], nullptr)
      << "OpenAI's record of a refused request: the 400 response says it";
  // A chat line with no messages: refused alone, naming the field.
  EXPECT_NE(bad["response"]["body"]["error"]["message"].get<std::string>().find(
                "'body.messages' must be a non-empty list"),
            std::string::npos)
      << bad.dump();
}

// --served-model-name is the records' "model"; system_fingerprint names the weights and their
// dtype: the same for two runs of one model, another for another dtype.
TEST_F(Engine, ServedModelNameAndSystemFingerprint) {
  const std::string in = work_ + "/served.jsonl";
  std::ofstream(in) << json({{"custom_id", "a"},
                             {"method", "POST"},
                             {"url", "/v1/completions"},
                             {"body",
                              {{"model", "llama-served"}, {"prompt", "Once"}, {"max_tokens", 3}}}})
                           .dump()
                    << "\n";
  const auto body_of = [&](const std::string& name, const std::string& flags) {
    const std::string out = work_ + "/" + name + ".jsonl";
    const CommandResult r = run(in, out, flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("asks for model"), std::string::npos) << "the served name matches";
    return read_jsonl(out).at(0)["response"]["body"];
  };
  const json first = body_of("served1", "--served-model-name llama-served");
  const json again = body_of("served2", "--served-model-name llama-served");
  const json bf16 = body_of("served3", "--served-model-name llama-served --dtype bf16");
  EXPECT_EQ(first["model"], "llama-served");
  ASSERT_TRUE(first["system_fingerprint"].is_string());
  EXPECT_EQ(first["system_fingerprint"].get<std::string>().rfind("fp_", 0), 0u);
  EXPECT_EQ(first["system_fingerprint"], again["system_fingerprint"]);
  EXPECT_NE(first["system_fingerprint"], bf16["system_fingerprint"]);
}

// logprobs of the greedy continuation equal log-softmax of run.c's own logits (shipped file).
TEST_F(Engine, LogprobsMatchTheShippedLogits) {
  const std::string in = work_ + "/lp.jsonl";
  std::ofstream(in) << R"({"id": 0, "prompt": "Once upon a time", "max_tokens": 59, "logprobs": 3})"
                    << "\n";
  const std::string out = work_ + "/lp_out.jsonl";
  CommandResult r = run(in, out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json rec = read_jsonl(out).at(0);
  const json& lp = rec["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 59u) << rec.dump();
  std::ifstream f(stories_ + "/logits_once_upon_a_time.f32", std::ios::binary);
  std::vector<float> logits(64 * 512);
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(logits.data()),
                     static_cast<std::streamsize>(logits.size() * 4)));
  std::ifstream refs(stories_ + "/reference_greedy.jsonl");
  std::string line;
  std::getline(refs, line);
  const json ref = json::parse(line);
  for (size_t g = 0; g < 59; ++g) {
    const float* row = logits.data() + (4 + g) * 512;  // position 4 is the prompt's last token
    double mx = row[0], sum = 0;
    for (int v = 0; v < 512; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (int v = 0; v < 512; ++v) sum += std::exp(row[v] - mx);
    const int token = ref["generated_tokens"][g].get<int>();
    const double expected = row[token] - mx - std::log(sum);
    EXPECT_NEAR(lp["token_logprobs"][g].get<double>(), expected, 1e-4) << "token " << g;
    ASSERT_EQ(lp["top_logprobs"][g].size(), 3u);
    double best = -1e30;
    for (const auto& [text, value] : lp["top_logprobs"][g].items())
      best = std::max(best, value.get<double>());
    EXPECT_NEAR(best, expected, 1e-4) << "greedy: the chosen token is the most likely";
  }
}

TEST_F(Engine, StatsAndTraceFilesHoldPlausibleFigures) {
  const std::string in = mixed_input("stats", 10, 30);
  const std::string out = work_ + "/stats_out.jsonl", stats_path = work_ + "/stats.json",
                    trace_path = work_ + "/trace.json";
  CommandResult r = run(in, out, "--stats " + stats_path + " --trace " + trace_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json stats, trace;
  std::ifstream(stats_path) >> stats;
  std::ifstream(trace_path) >> trace;
  long long generated = 0, prompt = 0;
  for (const json& rec : read_jsonl(out)) {
    generated += rec["completion_tokens"].get<long long>();
    prompt += rec["prompt_tokens"].get<long long>();
  }
  EXPECT_EQ(stats["requests"], 10);
  EXPECT_EQ(stats["generated_tokens"].get<long long>(), generated);
  EXPECT_EQ(stats["prompt_tokens"].get<long long>(), prompt);
  EXPECT_GT(stats["output_tokens_per_second"].get<double>(), 0);
  for (const char* k : {"ttft_seconds", "tpot_seconds"})
    for (const char* p : {"p50", "p90", "p99"}) {
      EXPECT_GT(stats[k][p].get<double>(), 0) << k << " " << p;
      EXPECT_LT(stats[k][p].get<double>(), stats["elapsed_seconds"].get<double>()) << k << " " << p;
    }
  EXPECT_LE(stats["ttft_seconds"]["p50"].get<double>(), stats["ttft_seconds"]["p99"].get<double>());
  ASSERT_EQ(stats["ranks"].size(), 1u);
  const json& rank = stats["ranks"][0];
  EXPECT_GT(rank["peak_memory_bytes"].get<double>(), rank["weight_bytes"].get<double>());
  // stories260K in f32 (260032 parameters), plus the packed copy of the tied head (512 x 64) and
  // the zero rows that pad w1 and w3 (172 rows) to the GEMM's 32-row panels, in 5 layers.
  EXPECT_EQ(rank["weight_bytes"].get<double>(),
            (260032.0 + 512 * 64 + 5 * 2 * (192 - 172) * 64) * 4);
  EXPECT_GT(rank["compute_seconds"].get<double>(), 0);
  // Counts are JSON integers ("steps": 12, not 12.0), as the run-wide ones are.
  for (const char* k : {"peak_memory_bytes", "weight_bytes", "kv_cache_bytes", "kv_capacity_tokens",
                        "steps", "all_reduce_calls", "all_reduce_bytes"})
    EXPECT_TRUE(rank[k].is_number_integer()) << k << " is " << rank[k].dump();
  EXPECT_TRUE(stats["steps"].is_number_integer());
  EXPECT_EQ(rank["steps"], stats["steps"]) << "one rank takes every step of the run";
  EXPECT_GE(rank["bubble_fraction"].get<double>(), 0);
  EXPECT_LE(rank["bubble_fraction"].get<double>(), 1);
  std::set<std::string> names;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  EXPECT_TRUE(names.count("forward")) << trace.dump().substr(0, 500);
  EXPECT_TRUE(names.count("sample"));
  EXPECT_TRUE(names.count("plan a group")) << "the scheduler track has rank 0's planning";
  EXPECT_TRUE(names.count("apply tokens"));
}

}  // namespace
