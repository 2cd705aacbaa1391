// `tpllama perplexity`: perplexity of a text file with a strided sliding window, run as scoring
// requests through the same distributed engine as `run`.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/output_files.h"
#include "app/run_report.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "core/log.h"
#include "io/output_holds.h"
#include "io/result_writer.h"
#include "io/resume.h"
#include "io/window_file.h"

namespace tpllama {

namespace {

// A corpus is read whole and tokenized at once: a bound on what a wrong path (/dev/zero) costs.
constexpr uint64_t kMaxCorpusBytes = uint64_t{1} << 30;

// The windows not scored yet, in corpus order, as scoring requests whose id is the window's number.
class WindowSource : public RequestSource {
 public:
  WindowSource(std::vector<int> tokens, int bos, std::vector<Window> windows,
               std::vector<bool> done)
      : tokens_(std::move(tokens)),
        bos_(bos),
        windows_(std::move(windows)),
        done_(std::move(done)) {}

  std::optional<Request> next(bool /*wait*/) override {
    while (next_ < windows_.size() && done_[next_]) ++next_;
    if (next_ == windows_.size()) return std::nullopt;
    const Window& w = windows_[next_];
    Request r;
    r.id = next_;
    r.line = next_ + 1;
    r.scoring = true;
    r.token_ids.push_back(bos_);
    r.token_ids.insert(r.token_ids.end(), tokens_.begin() + w.begin, tokens_.begin() + w.end);
    r.n_context_tokens = static_cast<int>(r.token_ids.size()) - w.scored;
    ++next_;
    return r;
  }
  bool ended() const override {
    size_t n = next_;
    while (n < windows_.size() && done_[n]) ++n;
    return n == windows_.size();
  }

 private:
  std::vector<int> tokens_;
  int bos_;
  std::vector<Window> windows_;
  std::vector<bool> done_;
  size_t next_ = 0;
};

// Each window's score, by window: those an earlier run left in the --windows file and those of
// this run (appended to the file as they come). The total sums them in window order, so a resumed
// run adds the same numbers in the same order as one that never stopped.
class WindowScores : public ResultSink {
 public:
  explicit WindowScores(size_t windows) : scores_(windows) {}

  void keep(const WindowScore& s) { scores_[static_cast<size_t>(s.window)] = s; }
  void log_to(std::unique_ptr<ResultWriter> file) { file_ = std::move(file); }

  void write(const Result& r) override {
    if (r.finish_reason == "error") fail("perplexity window ", r.id.dump(), " failed: ", r.error);
    TPLLAMA_CHECK(r.score.has_value(), "window without a score");
    const WindowScore s{r.id.get<long long>(), r.score->n_tokens, -r.score->logprob};
    keep(s);
    if (file_) file_->write_line(window_score_line(s));
  }
  void sync() override {
    if (file_) file_->sync();
  }

  // (summed NLL, tokens); every window must have its score.
  std::pair<double, long long> total() const {
    double nll = 0;
    long long tokens = 0;
    for (size_t i = 0; i < scores_.size(); ++i) {
      TPLLAMA_CHECK(scores_[i].has_value(), "perplexity window ", i, " was never scored");
      nll += scores_[i]->nll;
      tokens += scores_[i]->n_tokens;
    }
    return {nll, tokens};
  }

 private:
  std::vector<std::optional<WindowScore>> scores_;
  std::unique_ptr<ResultWriter> file_;
};

// Opens --windows (held for the run from its start). With --resume, the scores it holds for this
// same run go into `scores` and are marked done; without, or when it is missing or empty, it starts
// over with a header naming this run.
std::vector<bool> open_window_file(const PerplexityOptions& o, const WindowRun& run,
                                   const std::vector<Window>& windows, WindowScores& scores) {
  std::vector<bool> done(windows.size(), false);
  if (o.windows.empty()) return done;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(o.windows, ec);
  if (status.type() != fs::file_type::not_found && status.type() != fs::file_type::regular)
    fail("--windows ", o.windows,
         " is not a regular file: the windows file is cut and appended to");
  const bool had_file = status.type() == fs::file_type::regular && fs::file_size(o.windows) > 0;
  bool append = false;
  if (o.resume) {
    const WindowFile file = read_window_file(o.windows);
    if (file.run) {
      done = resumed_windows(o.windows, file, run, windows);
      for (const WindowScore& s : file.scores) scores.keep(s);
      append = true;
      if (file.torn_bytes > 0) cut_torn_last_line(o.windows);
    } else if (file.torn_bytes > 0 && !starts_like_a_window_header(file.torn_start)) {
      fail("cannot resume from ", o.windows, ": it is not a windows file (", file.torn_bytes,
           " bytes without a newline, starting ", describe_json(nlohmann::json(file.torn_start)),
           "); give another --windows file, or --overwrite instead of --resume to replace it");
    }
    log::info("resume: " + std::to_string(file.scores.size()) + " of " +
              std::to_string(windows.size()) + " windows already scored in " + o.windows +
              (file.torn_bytes == 0 ? ""
               : file.run
                   ? "; cut a torn last line of " + std::to_string(file.torn_bytes) + " bytes"
                   : "; its header was torn (" + std::to_string(file.torn_bytes) +
                         " bytes): starting over"));
  } else if (had_file) {
    log::info("--overwrite: replacing the " +
              std::to_string(std::filesystem::file_size(o.windows)) + " bytes of windows in " +
              o.windows);
  }
  auto file = std::make_unique<ResultWriter>(o.windows, OutputFormat::kJsonl, append);
  if (!append) file->write_line(window_run_line(run));
  scores.log_to(std::move(file));
  return done;
}

// Rank 0's side of a perplexity run: the corpus as windows still to score, and where their scores
// go.
struct CorpusWindows {
  std::unique_ptr<WindowScores> scores;
  std::unique_ptr<WindowSource> source;
  int window = 0, stride = 0;  // text tokens per window (BOS comes on top), between window starts
  long long remaining = 0;     // windows to score in this run
};

// Reads and tokenizes the corpus, plans its windows within the session's context, and opens
// --windows (with --resume, the windows it holds are not scored again).
CorpusWindows prepare_windows(const PerplexityOptions& o, const Session& session) {
  CorpusWindows c;
  // Read as it comes (a corpus may be `<(zcat corpus.gz)`), with a stop signal heard while waiting.
  const std::string text = read_stream_file(o.run.input, "corpus", kMaxCorpusBytes);
  const int context = session.context();
  if (o.context_len > context)
    log::warn("--context-len " + std::to_string(o.context_len) +
              " is beyond the model's context: windows of " + std::to_string(context) + " tokens");
  c.window = context -
             1;  // the run's context is already --context-len where that is smaller; room for BOS
  if (c.window < 1) fail("--context-len ", o.context_len, " leaves no room for a token after BOS");
  c.stride = o.stride > 0 ? std::min(o.stride, c.window) : std::max(1, c.window / 2);
  if (o.stride > c.window)
    log::warn("--stride " + std::to_string(o.stride) + " would skip tokens between windows of " +
              std::to_string(c.window) + " text tokens: stride " + std::to_string(c.window));
  std::vector<int> tokens = session.tokenizer()->encode(text);
  if (tokens.empty()) fail(o.run.input, " holds no tokens");
  std::vector<Window> windows = plan_windows(static_cast<int>(tokens.size()), c.window, c.stride);
  WindowRun run;
  if (!o.windows.empty()) {
    run.model = model_name(o.run.session.model);
    run.model_fingerprint = model_fingerprint(o.run.session.model);
    run.dtype = dtype_name(session.dtype());
    run.kv_dtype = dtype_name(session.kv_dtype());
    run.corpus_tokens = static_cast<long long>(tokens.size());
    run.corpus_hash = corpus_hash(tokens);
    run.context_len = c.window + 1;
    run.stride = c.stride;
    run.windows = static_cast<long long>(windows.size());
  }
  c.scores = std::make_unique<WindowScores>(windows.size());
  std::vector<bool> done = open_window_file(o, run, windows, *c.scores);
  c.remaining = std::count(done.begin(), done.end(), false);
  c.source = std::make_unique<WindowSource>(std::move(tokens), session.config().bos_token_id,
                                            std::move(windows), std::move(done));
  return c;
}

}  // namespace

void add_perplexity_command(CLI::App& app, PerplexityOptions& o) {
  CLI::App* c = app.add_subcommand("perplexity", "Perplexity of a text file (sliding window)");
  c->add_option("--model", o.run.session.model, "Hugging Face LLaMA model directory")->required();
  c->add_option("--input", o.run.input, "Text file (read whole, tokenized as one text)")
      ->required();
  c->add_option("--output", o.json, "Also write the result as JSON to this file");
  c->add_option("--context-len", o.context_len,
                "Tokens per window, BOS included (default: the model's context)")
      ->check(at_least(2));
  c->add_option("--stride", o.stride, "Tokens between window starts (default: half the window)")
      ->check(at_least(1));
  c->add_option("--windows", o.windows,
                "Also append each window's score to this JSONL file as it is scored, so --resume "
                "can continue a "
                "stopped run");
  CLI::Option* resume = c->add_flag("--resume", o.resume,
                                    "Keep the windows already scored in --windows (a torn last "
                                    "line is cut) and score only the rest")
                            ->needs("--windows");
  c->add_flag("--overwrite", o.overwrite,
              "Replace what an earlier run left in --windows and --output (without it, or "
              "--resume, a non-empty "
              "one is refused)")
      ->excludes(resume);
  c->add_option("--max-seqs", o.run.session.engine.max_seqs, "Windows in flight at once")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--max-batch-tokens", o.run.session.engine.max_batch_tokens,
                "Tokens per forward step")
      ->capture_default_str()
      ->check(at_least(1));
  add_log_interval_option(*c, o.run);
  add_layout_options(*c, o.run);
}

int perplexity_command(PerplexityOptions o, const MpiSession& mpi) {
  TraceRecorder trace(false);  // perplexity has no --trace; the session's communicators take one
  SessionOptions options = o.run.session;
  if (o.context_len > 0) options.engine.command_context = o.context_len;
  options.engine.context_flag = "--context-len";
  OutputHolds holds;  // rank 0's: --output and --windows, from the run's start
  Session session(mpi, options, [&](const Session& s) {
    if (!s.is_rank0()) return;
    check_output_files({o.run.input}, {{"--output", o.json}, {"--windows", o.windows}},
                       model_files(o.run.session.model));
    const std::string how =
        "pass --resume (with --windows) to continue the run, or --overwrite to replace it";
    check_not_replacing("--windows", o.windows, o.resume || o.overwrite, how);
    check_not_replacing("--output", o.json, o.resume || o.overwrite, how);
    check_input_file(o.run.input);
    if (output_is_a_file(o.json)) holds.hold("--output", o.json);
    if (output_is_a_file(o.windows)) holds.hold("--windows", o.windows);
  });
  session.load();
  // Rank 0: the corpus, its windows and the scores an earlier run left in --windows.
  CorpusWindows corpus;
  collective_phase([&] {
    if (session.is_rank0()) corpus = prepare_windows(o, session);
  });
  EngineIo io;
  io.reader = corpus.source.get();
  io.writer = corpus.scores.get();
  io.total_requests = corpus.remaining;
  io.progress_unit = "windows";
  const Continuation continuation{!o.windows.empty(),
                                  "without --windows there is nothing to resume: run it again to "
                                  "start over (--windows FILE keeps each "
                                  "window's score for --resume)"};
  const RunSummary summary = session.serve(serve_options(o.run, continuation), io, trace);
  report_run(session, summary, trace, "", "");
  if (!session.is_rank0()) return 0;
  if (const int rc = finish_run(session, summary, continuation, ""); rc != 0) {
    holds.drop_if_unwritten(o.json);  // a stopped run has no result: no empty file in its place
    return rc;
  }
  const auto [nll, n_tokens] = corpus.scores->total();
  const int window = corpus.window, stride = corpus.stride;
  const double mean = n_tokens > 0 ? nll / static_cast<double>(n_tokens) : 0.0;
  nlohmann::json result = {{"tokens", n_tokens},
                           {"mean_nll", mean},
                           {"perplexity", std::exp(mean)},
                           {"context_len", window + 1},
                           {"stride", stride}};
  std::printf(
      "perplexity %.6f over %lld tokens (mean NLL %.6f nats; windows of %d tokens, stride %d)\n",
      std::exp(mean), n_tokens, mean, window + 1, stride);
  holds.release(o.json);  // write_json_file locks it itself
  if (!o.json.empty()) write_json_file(o.json, result, "--output");
  return 0;
}

}  // namespace tpllama
