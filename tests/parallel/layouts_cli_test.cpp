// The tpllama binary under mpirun: every TP x PP layout gives, byte for byte, the single-rank
// output (and so the reference text); shard directories round-trip; bad layouts, missing shards
// and a killed rank end the job non-zero in bounded time.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include <sstream>

#include <gtest/gtest.h>

#include "../e2e/cli_util.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Layout {
  int tp;
  int pp;
  std::string pp_layers;  // "" or e.g. "1,4"
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << "tp " << l.tp << " pp " << l.pp << " " << l.pp_layers;
}

class Distributed : public ::testing::Test {
 protected:
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
    // Sampled requests: every sampler stage, seeded per request.
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

  static std::string stories_, work_, model_, input_, sampled_input_;
  static CommandResult setup_, single_, single_sampled_;
  static std::vector<json> references_;
};

std::string Distributed::stories_, Distributed::work_, Distributed::model_, Distributed::input_,
    Distributed::sampled_input_;
CommandResult Distributed::setup_, Distributed::single_, Distributed::single_sampled_;
std::vector<json> Distributed::references_;

class EveryLayout : public Distributed, public ::testing::WithParamInterface<Layout> {};

TEST_P(EveryLayout, GreedyAndSampledOutputAreByteIdenticalToOneRank) {
  const Layout l = GetParam();
  const std::string out = work_ + "/layout.jsonl";
  std::string flags = " --tp " + std::to_string(l.tp) + " --pp " + std::to_string(l.pp) +
                      " --overwrite";  // one file
  if (!l.pp_layers.empty()) flags += " --pp-layers " + l.pp_layers;
  CommandResult r = run_shell(mpirun(l.tp * l.pp) + binary() + " run --model " + model_ +
                              " --input " + input_ + " --output " + out + flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tp " + std::to_string(l.tp) + " x pp " + std::to_string(l.pp)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(all of them)"), std::string::npos)
      << "every checkpoint element held once:\n"
      << r.output;
  expect_same_as_single_rank(out);

  // Sampling gathers whole rows across TP and draws with rank 0's uniform: same tokens as one rank.
  const std::string sampled_out = work_ + "/layout_sampled.jsonl";
  CommandResult s = run_shell(mpirun(l.tp * l.pp) + binary() + " run --model " + model_ +
                              " --input " + sampled_input_ + " --output " + sampled_out + flags);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(lines_by_id(sampled_out), lines_by_id(work_ + "/single_sampled.jsonl"));
}

INSTANTIATE_TEST_SUITE_P(Layouts, EveryLayout,
                         ::testing::Values(Layout{1, 1, ""}, Layout{2, 1, ""}, Layout{4, 1, ""},
                                           Layout{8, 1, ""}, Layout{1, 2, ""}, Layout{1, 5, ""},
                                           Layout{2, 2, ""}, Layout{2, 2, "1,4"}),
                         [](const auto& param_info) {
                           std::ostringstream name;
                           name << "tp" << param_info.param.tp << "_pp" << param_info.param.pp;
                           if (!param_info.param.pp_layers.empty()) name << "_layers_1_4";
                           return name.str();
                         });

TEST_F(Distributed, DefaultLayoutOnOneNodeIsAllTensorParallel) {
  const std::string out = work_ + "/default.jsonl";
  CommandResult r = run_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " +
                              input_ + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tp 4 x pp 1 on 1 node"), std::string::npos) << r.output;
  expect_same_as_single_rank(out);
}

TEST_F(Distributed, ShardedDirectoryRoundTripsAndRefusesOtherLayouts) {
  const std::string sharded = work_ + "/sharded";
  CommandResult s =
      run_shell(binary() + " shard --model " + model_ + " --tp 2 --pp 2 --out " + sharded);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const std::string out = work_ + "/sharded.jsonl";
  CommandResult r = run_shell(mpirun(4) + binary() + " run --model " + sharded + " --input " +
                              input_ + " --output " + out + " --tp 2 --pp 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_as_single_rank(out);

  CommandResult wrong = run_shell(mpirun(4) + binary() + " run --model " + sharded + " --input " +
                                  input_ + " --output " + work_ + "/wrong.jsonl --tp 4 --pp 1");
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("sharded for tp=2 pp=2"), std::string::npos) << wrong.output;
  EXPECT_EQ(count_occurrences(wrong.output, "error:"), 1) << "one message, not one per rank:\n"
                                                          << wrong.output;

  fs::remove(sharded + "/rank-00003-of-00004.safetensors");
  CommandResult missing = run_shell(mpirun(4) + binary() + " run --model " + sharded + " --input " +
                                    input_ + " --output " + work_ + "/missing.jsonl --tp 2 --pp 2");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("rank-00003-of-00004.safetensors"), std::string::npos)
      << missing.output;
  EXPECT_EQ(count_occurrences(missing.output, "error:"), 1) << missing.output;

  // Sharding again into the same directory for another layout replaces the earlier rank files.
  s = run_shell(binary() + " shard --model " + model_ + " --tp 2 --pp 1 --out " + sharded);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  std::vector<std::string> ranks;
  for (const auto& e : fs::directory_iterator(sharded))
    if (e.path().extension() == ".safetensors") ranks.push_back(e.path().filename().string());
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<std::string>{"rank-00000-of-00002.safetensors",
                                             "rank-00001-of-00002.safetensors"}));
  // Uneven stages: the hint it prints is a command line that runs them.
  s = run_shell(binary() + " shard --model " + model_ + " --tp 1 --pp 2 --pp-layers 1,4 --out " +
                sharded);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("run it with mpirun -np 2 ... --tp 1 --pp 2 --pp-layers 1,4"),
            std::string::npos)
      << s.output;
  // Never into the model itself, nor into another checkpoint.
  for (const std::string& dir : {model_, model_ + "/."}) {
    s = run_shell(binary() + " shard --model " + model_ + " --tp 2 --out " + dir);
    EXPECT_NE(s.exit_code, 0);
    EXPECT_NE(s.output.find("is the model directory itself"), std::string::npos) << s.output;
  }
  const std::string other = work_ + "/other_checkpoint";
  fs::create_directories(other);
  std::ofstream(other + "/model.safetensors") << "x";
  s = run_shell(binary() + " shard --model " + model_ + " --tp 2 --out " + other);
  EXPECT_NE(s.exit_code, 0);
  EXPECT_NE(s.output.find("holds model.safetensors, which is not a shard"), std::string::npos)
      << s.output;
  for (const auto& e : fs::directory_iterator(model_))
    EXPECT_NE(e.path().filename().string().rfind("rank-", 0), 0u)
        << "a shard was written into the model: " << e.path();
}

struct BadLayout {
  int np;
  std::string flags;
  std::string needle;
};

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
        BadLayout{4, "--tp 3 --pp 1", "tp (3) x pp (1) = 3 does not match the number of ranks (4)"},
        BadLayout{3, "--tp 3", "num_attention_heads (8) is not divisible by tp (3)"},
        BadLayout{6, "--pp 6", "pp (6) is larger than the number of layers (5)"},
        BadLayout{2, "--pp 2 --pp-layers 1,1", "--pp-layers sums to 2 but the model has 5 layers"}),
    [](const auto& param_info) {
      return "np" + std::to_string(param_info.param.np) + "_" + std::to_string(param_info.index);
    });

// Scheduling settings, a cache small enough to preempt, and logprobs: identical to one rank.
TEST_F(Distributed, SchedulingAndLogprobsMatchOneRankAtEveryDepth) {
  const std::string in = work_ + "/sched_in.jsonl";
  {
    std::ofstream f(in);
    const char* prompts[] = {"Once upon a time", "The little dog", "She said", "",
                             "Tom and Lily",     "One day"};
    for (int i = 0; i < 18; ++i) {
      json request = {{"id", i}, {"prompt", prompts[i % 6]}, {"max_tokens", 100 + i}};
      if (i % 3 == 0) request["logprobs"] = 2;
      f << request.dump() << "\n";
    }
  }
  const std::string base = work_ + "/sched_base.jsonl";
  CommandResult b =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + base);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto expected = lines_by_id(base);
  for (const std::string& flags : std::vector<std::string>{
           "--tp 2 --pp 2 --max-seqs 3", "--tp 2 --pp 2 --max-batch-tokens 16",
           "--tp 1 --pp 4 --max-seqs 64 --max-batch-tokens 4096",
           "--tp 2 --pp 2 --kv-cache-memory 360KB --stats " + work_ + "/sched_stats.json",
           "--tp 4 --pp 1 --kv-block-size 5"}) {
    SCOPED_TRACE(flags);
    const std::string out = work_ + "/sched.jsonl";
    CommandResult r =
        run_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                  " --output " + out + " --overwrite " + flags);  // one file for each schedule
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto got = lines_by_id(out);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [id, line] : expected) {
      json want = json::parse(line), have = json::parse(got.at(id));
      ASSERT_EQ(want["finish_reason"], "length") << line;
      EXPECT_EQ(have["text"], want["text"]) << "id " << id;
      if (!want.contains("logprobs")) continue;
      ASSERT_TRUE(have.contains("logprobs")) << "id " << id;
      const json &wl = want["logprobs"]["token_logprobs"], &hl = have["logprobs"]["token_logprobs"];
      ASSERT_EQ(hl.size(), wl.size());
      for (size_t i = 0; i < wl.size(); ++i)
        EXPECT_NEAR(hl[i].get<double>(), wl[i].get<double>(), 1e-4);
    }
  }
  json stats;
  std::ifstream(work_ + "/sched_stats.json") >> stats;
  EXPECT_GT(stats["preemptions"].get<int>(), 0);
  EXPECT_EQ(stats["ranks"].size(), 4u);
}

// Scoring and perplexity: the same numbers at (2,2) and (4,1) as on one rank, within 1e-4.
TEST_F(Distributed, ScoringAndPerplexityDoNotDependOnLayout) {
  const std::string in = work_ + "/score_in.jsonl", corpus = work_ + "/corpus.txt";
  {
    std::ofstream f(in);
    for (size_t i = 0; i < references_.size(); ++i) {
      const std::string prompt = references_[i]["prompt"], output = references_[i]["output"];
      if (output.size() == prompt.size()) continue;
      f << json({{"id", i},
                 {"context", prompt},
                 {"continuation", output.substr(prompt.size())},
                 {"logprobs", true}})
               .dump()
        << "\n";
    }
    std::ofstream(corpus) << references_[3]["output"].get<std::string>();
  }
  auto score = [&](const std::string& launcher, const std::string& flags, const std::string& tag) {
    const std::string out = work_ + "/score_" + tag + ".jsonl",
                      ppl = work_ + "/ppl_" + tag + ".json";
    CommandResult r = run_shell(launcher + binary() + " run --model " + model_ + " --input " + in +
                                " --output " + out + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    CommandResult p =
        run_shell(launcher + binary() + " perplexity --model " + model_ + " --input " + corpus +
                  " --context-len 64 --stride 24 --output " + ppl + flags);
    EXPECT_EQ(p.exit_code, 0) << p.output;
    json ppl_json;
    std::ifstream(ppl) >> ppl_json;
    std::map<int, json> records;
    std::ifstream f(out);
    std::string line;
    while (std::getline(f, line)) records[json::parse(line)["id"].get<int>()] = json::parse(line);
    return std::make_pair(records, ppl_json);
  };
  const auto [one, one_ppl] = score("", "", "one");
  ASSERT_EQ(one.size(), 4u);
  // Layout and batching: small steps split the continuations across many steps and groups.
  for (const auto& [np, flags] : std::vector<std::pair<int, std::string>>{
           {4, " --tp 2 --pp 2 --max-batch-tokens 37"},
           {4, " --tp 4 --pp 1 --max-seqs 2 --max-batch-tokens 5"}}) {
    SCOPED_TRACE(flags);
    const auto [got, got_ppl] =
        score(mpirun(np), flags, "layout_" + std::to_string(std::hash<std::string>()(flags)));
    ASSERT_EQ(got.size(), one.size());
    for (const auto& [id, want] : one) {
      const json& have = got.at(id);
      EXPECT_NEAR(have["logprob"].get<double>(), want["logprob"].get<double>(), 1e-4)
          << "id " << id;
      EXPECT_EQ(have["is_greedy"], want["is_greedy"]);
      EXPECT_TRUE(have["is_greedy"].get<bool>()) << "a reference continuation is the greedy one";
      EXPECT_EQ(have["n_tokens"], want["n_tokens"]);
    }
    EXPECT_EQ(got_ppl["tokens"], one_ppl["tokens"]);
    EXPECT_NEAR(got_ppl["mean_nll"].get<double>(), one_ppl["mean_nll"].get<double>(), 1e-5);
  }
}

// kill -9 of the whole mpirun job part-way, then --resume: exactly once, same texts.
TEST_F(Distributed, KilledJobResumesExactlyOnce) {
  const std::string in = work_ + "/job_in.txt";
  {
    std::ofstream f(in);
    for (int i = 0; i < 2000; ++i)
      f << (i % 2 ? "Once upon a time " : "The little dog ") << i % 89 << "\n";
  }
  const std::string flags = " --tp 2 --pp 2 --max-tokens 8 --max-seqs 16";
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
  // The whole job, as a scheduler would: mpirun's process group and every rank under it.
  CommandResult ranks = run_shell("pgrep -P " + std::to_string(job));
  ::kill(-job, SIGKILL);
  std::istringstream pids(ranks.output);
  std::vector<pid_t> rank_pids;
  for (long p; pids >> p;) rank_pids.push_back(static_cast<pid_t>(p));
  for (pid_t p : rank_pids) ::kill(p, SIGKILL);
  ::waitpid(job, nullptr, 0);
  EXPECT_TRUE(wait_until_gone(rank_pids, 10).empty()) << "a killed rank is still alive";
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
  wait_for_lines(out, 100);
  ::kill(job, SIGUSR1);
  int status = 0;
  ::waitpid(job, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 75);
  EXPECT_LT(count_lines(out), 3000u);
  CommandResult r = run_shell(mpirun(4) + binary() + " run --model " + model_ + " --input " + in +
                              " --output " + out + flags + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_by_id(out), lines_by_id(full));
  EXPECT_EQ(count_lines(out), 3000u);
}

// --dtype int8 quantizes per group of 128 columns of the whole matrix, so every layout holds the
// same numbers: pipeline layouts give one rank's int8 text byte for byte, and a TP split that cuts
// a group (stories260K's 64-wide o_proj over 2 ranks) is refused before loading, by name.
TEST_F(Distributed, Int8PipelineLayoutsMatchOneRankAndGroupCuttingTpIsRefused) {
  const std::string one = work_ + "/int8_one.jsonl", pp = work_ + "/int8_pp.jsonl";
  CommandResult single = run_shell(binary() + " run --model " + model_ + " --input " + input_ +
                                   " --output " + one + " --dtype int8 --ordered");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  CommandResult staged = run_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " +
                                   input_ + " --output " + pp + " --dtype int8 --ordered --pp 2");
  ASSERT_EQ(staged.exit_code, 0) << staged.output;
  EXPECT_EQ(read_jsonl(pp), read_jsonl(one));
  CommandResult tp =
      run_shell(mpirun(2) + binary() + " run --model " + model_ + " --input " + input_ +
                " --output " + work_ + "/int8_tp.jsonl --dtype int8 --tp 2");
  EXPECT_EQ(tp.exit_code, 1) << tp.output;
  EXPECT_NE(tp.output.find("--dtype int8 quantizes model.layers.0.self_attn.o_proj.weight per "
                           "group of 128 of its 64 "
                           "columns (input features), but --tp 2 gives rank 0 columns 0 to 31"),
            std::string::npos)
      << tp.output;
  EXPECT_EQ(count_occurrences(tp.output, "--dtype int8 quantizes"), 1)
      << "said once, by the lowest failing rank";
}

// TP layouts of int8, on a random model wide enough to split into whole 128-column groups (512
// wide, FFN 1024: --tp 2 and 4 do). The int8 checkpoint `convert --dtype int8` writes gives, on one
// rank with --dtype auto, the text quantizing the f32 original at load gives; so do its TP and
// TP x PP layouts, and the int8 shard files `shard --dtype int8` makes of the f32 original.
TEST_F(Distributed, Int8CheckpointAndItsTpLayoutsMatchOneRankQuantizingAtLoad) {
  const std::string config = work_ + "/wide_config.json";
  std::ofstream(config) << json({{"hidden_size", 512},
                                 {"intermediate_size", 1024},
                                 {"num_hidden_layers", 2},
                                 {"num_attention_heads", 8},
                                 {"num_key_value_heads", 4},
                                 {"vocab_size", 512},
                                 {"max_position_embeddings", 256},
                                 {"rms_norm_eps", 1e-5}})
                               .dump();
  const std::string f32 = work_ + "/wide_f32", int8 = work_ + "/wide_int8",
                    shards = work_ + "/wide_shards";
  for (const auto& [dir, dtype] : {std::pair{f32, "f32"}, std::pair{int8, "int8"}}) {
    CommandResult c = run_shell(binary() + " convert --from random --config " + config +
                                " --seed 7 --tokenizer " + stories_ + "/tok512.model --dtype " +
                                dtype + " --out " + dir);
    ASSERT_EQ(c.exit_code, 0) << c.output;
  }
  CommandResult s =
      run_shell(binary() + " shard --model " + f32 + " --tp 2 --dtype int8 --out " + shards);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const std::string in = work_ + "/wide_prompts.jsonl";
  std::ofstream(in)
      << "{\"id\": 0, \"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"logprobs\": 2}\n"
      << "{\"id\": 1, \"prompt\": \"The little dog\", \"max_tokens\": 24, \"logprobs\": 2}\n";
  auto run = [&](int ranks, const std::string& model, const std::string& flags) {
    const std::string out = work_ + "/wide_" + std::to_string(ranks) + "_" +
                            std::to_string(std::hash<std::string>()(model + flags)) + ".jsonl";
    CommandResult r = run_shell(mpirun(ranks) + binary() + " run --model " + model + " --input " +
                                in + " --output " + out + " --ordered" + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair{read_jsonl(out), r.output};
  };
  const auto [at_load, at_load_log] = run(1, f32, " --dtype int8");
  ASSERT_EQ(at_load.size(), 2u);
  const auto [stored, stored_log] = run(1, int8, "");
  EXPECT_NE(stored_log.find("weights int8"), std::string::npos)
      << "--dtype auto holds an int8 checkpoint as int8";
  EXPECT_EQ(stored, at_load) << "texts and log-probabilities";
  for (const auto& [ranks, flags] :
       {std::pair{2, " --tp 2"}, std::pair{4, " --tp 4"}, std::pair{4, " --tp 2 --pp 2"}}) {
    const auto [layout, log] = run(ranks, int8, flags);
    ASSERT_EQ(layout.size(), 2u) << flags << "\n" << log;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_EQ(layout[i]["text"], at_load[i]["text"]) << flags << ", request " << i;
  }
  const auto [sharded, sharded_log] = run(2, shards, " --tp 2");
  ASSERT_EQ(sharded.size(), 2u) << sharded_log;
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(sharded[i]["text"], at_load[i]["text"]) << "shards, request " << i;
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
