// Scoring and perplexity end to end: the continuation's log-probability against run.c's own
// logits, is_greedy, and perplexity against the independent fp64 reference forward.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "cli_util.h"
#include "llama_reference.h"
#include "text/tokenizer.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

class Scoring : public ::testing::Test {
 protected:
  void SetUp() override {
    ConvertedStories c = ConvertedStories::make("scoring");
    stories_ = c.stories;
    if (stories_.empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing;
    work_ = c.work;
    model_ = c.model;
    ASSERT_EQ(c.convert.exit_code, 0) << c.convert.output;
    std::ifstream refs(stories_ + "/reference_greedy.jsonl");
    std::string line;
    std::getline(refs, line);
    reference_ = json::parse(line);
  }
  void TearDown() override {
    if (!work_.empty()) fs::remove_all(work_);
  }

  // run.c's log-softmax of each generated token of the reference, from its shipped logits.
  std::vector<double> run_c_logprobs() const {
    std::ifstream f(stories_ + "/logits_once_upon_a_time.f32", std::ios::binary);
    std::vector<float> logits(64 * 512);
    EXPECT_TRUE(f.read(reinterpret_cast<char*>(logits.data()),
                       static_cast<std::streamsize>(logits.size() * 4)));
    std::vector<int> tokens = reference_["prompt_tokens"].get<std::vector<int>>();
    for (int t : reference_["generated_tokens"]) tokens.push_back(t);
    const size_t n_prompt = reference_["prompt_tokens"].size();
    std::vector<double> out;
    for (size_t g = 0; g < reference_["generated_tokens"].size(); ++g) {
      const float* row = logits.data() + (n_prompt - 1 + g) * 512;
      double mx = row[0], sum = 0;
      for (int v = 0; v < 512; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int v = 0; v < 512; ++v) sum += std::exp(row[v] - mx);
      out.push_back(row[tokens[n_prompt + g]] - mx - std::log(sum));
    }
    return out;
  }

  std::string stories_, work_, model_;
  json reference_;
};

TEST_F(Scoring, ContinuationLogprobIsTheSumOfRunCLogSoftmax) {
  const std::string prompt = reference_["prompt"], output = reference_["output"];
  const std::string continuation = output.substr(prompt.size());
  std::string changed = continuation;
  changed.replace(changed.find("girl"), 4, "boy ");
  const std::string in = work_ + "/score.jsonl", out = work_ + "/score_out.jsonl";
  std::ofstream(in)
      << json({{"id", "ref"},
               {"context", prompt},
               {"continuation", continuation},
               {"logprobs", true}})
             .dump()
      << "\n"
      << json({{"id", "changed"}, {"context", prompt}, {"continuation", changed}}).dump() << "\n";
  CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = by_id(read_jsonl(out));
  const json& got = records.at("\"ref\"");

  const std::vector<double> want = run_c_logprobs();
  const size_t n = want.size();  // 60: positions 4..63 of the logits file
  ASSERT_EQ(got["n_tokens"].get<size_t>(), n) << "the continuation tokenizes as run.c generated it";
  double expected = 0;
  for (size_t g = 0; g < n; ++g) {
    EXPECT_NEAR(got["token_logprobs"][g].get<double>(), want[g], 1e-4) << "token " << g;
    expected += want[g];
  }
  EXPECT_NEAR(got["logprob"].get<double>(), expected, 1e-4);
  EXPECT_TRUE(got["is_greedy"].get<bool>());
  EXPECT_FALSE(records.at("\"changed\"")["is_greedy"].get<bool>());
  EXPECT_LT(records.at("\"changed\"")["logprob"].get<double>(), expected);
}

// A scoring request preempted (its KV blocks taken by older generations) part way through its
// continuation recomputes its positions, and scores each continuation token once: the same
// token log-probabilities as run.c's, not the first ones again.
TEST_F(Scoring, PreemptedScoringRequestScoresEachTokenOnce) {
  const std::string prompt = reference_["prompt"], output = reference_["output"];
  const std::string in = work_ + "/preempt.jsonl", out = work_ + "/preempt_out.jsonl",
                    stats = work_ + "/preempt.json";
  {
    std::ofstream f(in);
    for (const char* id : {"g0", "g1", "g2"})
      f << json({{"id", id}, {"prompt", prompt}, {"max_tokens", 59}}).dump() << "\n";
    f << json({{"id", "ref"},
               {"context", prompt},
               {"continuation", output.substr(prompt.size())},
               {"logprobs", true}})
             .dump()
      << "\n";
  }
  CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + out +
                " --max-model-len 72 --kv-cache-memory 100KiB --kv-block-size 16 --stats " + stats);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json s;
  std::ifstream(stats) >> s;
  ASSERT_GT(s["preemptions"].get<int>(), 0)
      << "100 KiB hold 80 tokens in blocks of 16: not two of these 64- and 65-token sequences";
  const auto records = by_id(read_jsonl(out));
  const json& got = records.at("\"ref\"");
  const std::vector<double> want = run_c_logprobs();
  ASSERT_EQ(got["n_tokens"].get<size_t>(), want.size());
  ASSERT_EQ(got["token_logprobs"].size(), want.size());
  double expected = 0;
  for (size_t g = 0; g < want.size(); ++g) {
    EXPECT_NEAR(got["token_logprobs"][g].get<double>(), want[g], 1e-4) << "token " << g;
    expected += want[g];
  }
  EXPECT_NEAR(got["logprob"].get<double>(), expected, 1e-3);
}

// Perplexity with context 24 and stride 10 over a small text, recomputed window by window from the
// reference forward (llama2.c weights, Meta layout) with the same windows.
TEST_F(Scoring, PerplexityMatchesTheReferenceForward) {
  const std::string text = reference_["output"];
  const std::string corpus = work_ + "/corpus.txt", json_out = work_ + "/ppl.json";
  std::ofstream(corpus) << text;
  CommandResult r =
      run_shell(binary() + " perplexity --model " + model_ + " --input " + corpus +
                " --context-len 24 --stride 10 --log-interval 0 --output " + json_out +
                " --kv-cache-memory 48KiB");  // 38 tokens: the cache is sized for the window
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json got;
  std::ifstream(json_out) >> got;

  tpllama::Tokenizer tok(stories_ + "/tok512.model");
  const std::vector<int> tokens = tok.encode(text);
  reference::Config rc;
  reference::Weights rw = reference::load_llama2c(stories_ + "/stories260K.bin", &rc);
  const int window = 23, stride = 10, n = static_cast<int>(tokens.size());
  double nll = 0;
  long long scored = 0;
  int windows = 0;
  for (int begin = 0, prev_end = 0; prev_end < n; begin += stride, ++windows) {
    const int end = std::min(begin + window, n);
    std::vector<int> w = {1};
    w.insert(w.end(), tokens.begin() + begin, tokens.begin() + end);
    auto logits = reference::forward_all(rc, rw, w, reference::RopeLayout::kInterleaved);
    for (int p = std::max(prev_end, begin); p < end;
         ++p) {  // token p sits at window index p - begin + 1
      const auto& row = logits[static_cast<size_t>(p - begin)];
      double mx = row[0], sum = 0;
      for (double x : row) mx = std::max(mx, x);
      for (double x : row) sum += std::exp(x - mx);
      nll -= row[static_cast<size_t>(tokens[static_cast<size_t>(p)])] - mx - std::log(sum);
      ++scored;
    }
    prev_end = end;
  }
  EXPECT_EQ(got["tokens"].get<long long>(), scored);
  EXPECT_NEAR(got["mean_nll"].get<double>(), nll / static_cast<double>(scored), 1e-5);
  EXPECT_NEAR(got["perplexity"].get<double>(), std::exp(nll / static_cast<double>(scored)), 1e-4);
  // Progress lines count the windows out of their total (every update at --log-interval 0), as
  // windows, at the rate of the tokens scored: scoring generates none, so a generation rate would
  // read 0.0 throughout.
  const std::string done =
      "progress: " + std::to_string(windows) + "/" + std::to_string(windows) + " (100.0%) ";
  const size_t last = r.output.find(done);
  ASSERT_NE(last, std::string::npos) << r.output;
  const std::string line = r.output.substr(last, r.output.find('\n', last) - last);
  EXPECT_EQ(line.rfind(done + "windows, 0 errors, ", 0), 0u) << line;
  const size_t rate_end = line.find(" scored tok/s");
  ASSERT_NE(rate_end, std::string::npos) << line;
  const size_t rate_begin = line.rfind(' ', rate_end - 1) + 1;
  EXPECT_GT(std::stod(line.substr(rate_begin, rate_end - rate_begin)), 0.0) << line;
  EXPECT_EQ(line.find(" tok/s, "), line.find(" scored tok/s") + std::string(" scored").size())
      << "no generation rate beside it: " << line;
  // A window the cache cannot hold names perplexity's own flag.
  r = run_shell(binary() + " perplexity --model " + model_ + " --input " + corpus +
                " --context-len 64 --kv-cache-memory 48KiB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("less than one 64-token sequence needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a smaller --context-len"), std::string::npos) << r.output;
}

// A scoring request longer than the context is an error record that says so in scoring's terms
// (it generates nothing, so "no room to generate" would mislead); one that fits exactly is scored.
TEST_F(Scoring, TooLongScoringRequestIsAnErrorInItsOwnTerms) {
  const std::string in = work_ + "/long.jsonl", out = work_ + "/long_out.jsonl";
  std::ofstream(in) << json({{"id", "long"},
                             {"context", "Once upon a time"},
                             {"continuation", reference_["output"]}})
                           .dump()
                    << "\n";
  CommandResult r = run_shell(binary() + " run --model " + model_ + " --input " + in +
                              " --output " + out + " --max-model-len 16");
  EXPECT_EQ(r.exit_code, 65) << "every request failed\n" << r.output;
  const auto records = by_id(read_jsonl(out));
  const json& got = records.at("\"long\"");
  ASSERT_EQ(got["finish_reason"], "error") << got.dump();
  EXPECT_NE(got["error"].get<std::string>().find("context and continuation have"),
            std::string::npos)
      << got.dump();
  EXPECT_NE(got["error"].get<std::string>().find(
                "the context is 16 tokens: the continuation cannot be scored whole"),
            std::string::npos)
      << got.dump();
}

// SIGTERM stops perplexity as it stops run (exit status 75), but says how to go on truthfully:
// perplexity has no --resume, so it points at a rerun, not at a flag it would refuse.
TEST_F(Scoring, StoppedPerplexitySaysToRunAgainNotToResume) {
  const std::string corpus = work_ + "/big.txt", log_path = work_ + "/ppl_stop.log";
  {
    std::ofstream f(corpus);
    const std::string text = reference_["output"];
    for (int i = 0; i < 2000; ++i) f << text << "\n";  // about 600 kB: many seconds of windows
  }
  const pid_t pid =
      spawn_shell(binary() + " perplexity --model " + model_ + " --input " + corpus +
                  " --context-len 64 --threads 1 --log-interval 0 > " + log_path + " 2>&1");
  ASSERT_GT(pid, 0);
  const auto read_log = [&] {
    std::ifstream f(log_path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const auto start = std::chrono::steady_clock::now();
  while (read_log().find("progress: ") == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string text = read_log();
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << text;
  EXPECT_EQ(WEXITSTATUS(status), 75) << text;
  EXPECT_NE(text.find("run it again to start over"), std::string::npos) << text;
  EXPECT_EQ(text.find("with --resume"), std::string::npos)
      << text;  // as run says: "run again with --resume"
}

// With --windows, a stopped perplexity says to resume, and --resume scores only the windows the
// file lacks (after cutting a torn last line): the result is the uninterrupted run's, and every
// window is in the file exactly once.
TEST_F(Scoring, PerplexityResumesFromItsWindowsFile) {
  const std::string corpus = work_ + "/big.txt", log_path = work_ + "/ppl_windows.log";
  {
    std::ofstream f(corpus);
    const std::string text = reference_["output"];
    for (int i = 0; i < 1000; ++i) f << text << "\n";
  }
  const std::string flags = " --context-len 64 --threads 1 --log-interval 0";
  const std::string full_windows = work_ + "/full_windows.jsonl", full_json = work_ + "/full.json";
  const std::string windows = work_ + "/windows.jsonl", resumed_json = work_ + "/resumed.json";
  CommandResult full = run_shell(binary() + " perplexity --model " + model_ + " --input " + corpus +
                                 flags + " --windows " + full_windows + " --output " + full_json);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const size_t all_lines = count_lines(full_windows);  // the header and one line per window

  const pid_t pid = spawn_shell(binary() + " perplexity --model " + model_ + " --input " + corpus +
                                flags + " --windows " + windows + " > " + log_path + " 2>&1");
  ASSERT_GT(pid, 0);
  wait_for_lines(windows, 50);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::ifstream log(log_path);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << text;
  ASSERT_EQ(WEXITSTATUS(status), 75) << text;
  EXPECT_NE(text.find("run again with --resume to continue"), std::string::npos) << text;
  const size_t kept = count_lines(windows);
  ASSERT_LT(kept, all_lines) << "the run finished before the stop";
  const std::string torn = R"({"window": 99999, "n_t)";  // as a kill mid-write leaves it
  std::ofstream(windows, std::ios::app) << torn;

  CommandResult resumed =
      run_shell(binary() + " perplexity --model " + model_ + " --input " + corpus + flags +
                " --windows " + windows + " --resume --output " + resumed_json);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume: " + std::to_string(kept - 1) + " of " +
                                std::to_string(all_lines - 1) + " windows already scored"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(
      resumed.output.find("cut a torn last line of " + std::to_string(torn.size()) + " bytes"),
      std::string::npos)
      << resumed.output;
  json want, got;
  std::ifstream(full_json) >> want;
  std::ifstream(resumed_json) >> got;
  EXPECT_EQ(got["tokens"], want["tokens"]);
  // Windows scored in other batches may differ in the last float bits.
  EXPECT_NEAR(got["perplexity"].get<double>(), want["perplexity"].get<double>(),
              1e-6 * want["perplexity"].get<double>());
  std::map<long long, int> seen;
  std::vector<json> records = read_jsonl(windows);
  ASSERT_EQ(records.size(), all_lines);
  for (size_t i = 1; i < records.size(); ++i) ++seen[records[i]["window"].get<long long>()];
  EXPECT_EQ(seen.size(), all_lines - 1);
  for (const auto& [w, n] : seen) EXPECT_EQ(n, 1) << "window " << w;

  // A copy of the model elsewhere (staged to a node's disk) is the same model; one changed byte of
  // its weights (the last, which the fingerprint samples) is another: refused before anything in
  // the file changes.
  const std::string staged = work_ + "/staged-model";
  fs::copy(model_, staged, fs::copy_options::recursive);
  CommandResult same = run_shell(binary() + " perplexity --model " + staged + " --input " + corpus +
                                 flags + " --windows " + windows + " --resume");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("resume: " + std::to_string(all_lines - 1) + " of " +
                             std::to_string(all_lines - 1)),
            std::string::npos)
      << same.output;
  {
    std::fstream weights(staged + "/model.safetensors",
                         std::ios::in | std::ios::out | std::ios::binary);
    weights.seekg(-1, std::ios::end);
    const char last = static_cast<char>(weights.get() ^ 1);
    weights.seekp(-1, std::ios::end);
    weights.put(last);
  }
  std::ofstream(windows, std::ios::app) << torn;
  const uintmax_t bytes = fs::file_size(windows);
  CommandResult changed = run_shell(binary() + " perplexity --model " + staged + " --input " +
                                    corpus + flags + " --windows " + windows + " --resume");
  EXPECT_NE(changed.exit_code, 0);
  EXPECT_NE(changed.output.find("holds the windows of another run (model " +
                                fs::path(model_).filename().string() + " (fingerprint "),
            std::string::npos)
      << changed.output;
  EXPECT_EQ(fs::file_size(windows), bytes) << "a refused file was changed";

  // Another stride is another run's windows: refused, naming both strides.
  CommandResult other =
      run_shell(binary() + " perplexity --model " + model_ + " --input " + corpus + flags +
                " --stride 20 --windows " + windows + " --resume");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("holds the windows of another run (stride 31 there, 20 here)"),
            std::string::npos)
      << other.output;
  // A file of one line with no newline that no header starts like is not taken for a torn header.
  const std::string junk = work_ + "/junk.txt";
  std::ofstream(junk) << std::string(5000, 'x');
  CommandResult not_windows = run_shell(binary() + " perplexity --model " + model_ + " --input " +
                                        corpus + flags + " --windows " + junk + " --resume");
  EXPECT_NE(not_windows.exit_code, 0);
  EXPECT_NE(not_windows.output.find("it is not a windows file (5000 bytes without a newline"),
            std::string::npos)
      << not_windows.output;
  EXPECT_EQ(fs::file_size(junk), 5000u);
  CommandResult no_file =
      run_shell(binary() + " perplexity --model " + model_ + " --input " + corpus + " --resume");
  EXPECT_NE(no_file.exit_code, 0);
  EXPECT_NE(no_file.output.find("--resume requires --windows"), std::string::npos)
      << no_file.output;
}

}  // namespace
