// `tpllama perplexity`: perplexity of a text file with a strided sliding window, run as scoring
// requests through the same distributed engine as `run`.
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/mpi_comm.h"

namespace tpllama {

namespace {

// Windows over the corpus tokens, as in the Hugging Face strided-perplexity recipe: each window
// is BOS plus up to `window` tokens starting every `stride` tokens; only the tokens not scored by
// an earlier window are scored, with the rest of the window as their context.
class WindowSource : public RequestSource {
 public:
  WindowSource(std::vector<int> tokens, int bos, int window, int stride)
      : tokens_(std::move(tokens)), bos_(bos), window_(window), stride_(stride) {}

  std::optional<Request> next() override {
    const int n = static_cast<int>(tokens_.size());
    if (done_ || n == 0) return std::nullopt;
    const int end = std::min(begin_ + window_, n);
    Request r;
    r.id = windows_;
    r.line = static_cast<size_t>(windows_) + 1;
    r.scoring = true;
    r.token_ids.push_back(bos_);
    r.token_ids.insert(r.token_ids.end(), tokens_.begin() + begin_, tokens_.begin() + end);
    r.n_context_tokens = 1 + (std::max(prev_end_, begin_) - begin_);  // BOS + already-scored tokens
    prev_end_ = end;
    begin_ += stride_;
    done_ = end == n;
    ++windows_;
    return r;
  }
  // How many windows next() gives in all: starts 0, stride, 2·stride, ... until one reaches the end.
  long long total() const {
    const long long n = static_cast<long long>(tokens_.size());
    if (n == 0) return 0;
    return 1 + (n > window_ ? (n - window_ + stride_ - 1) / stride_ : 0);
  }

 private:
  std::vector<int> tokens_;
  int bos_, window_, stride_;
  int begin_ = 0, prev_end_ = 0, windows_ = 0;
  bool done_ = false;
};

class NllSink : public ResultSink {
 public:
  void write(const Result& r) override {
    if (r.finish_reason == "error") fail("perplexity window ", r.id.dump(), " failed: ", r.error);
    TPLLAMA_CHECK(r.score.has_value(), "window without a score");
    nll_ -= r.score->logprob;
    tokens_ += r.score->n_tokens;
  }
  double nll() const { return nll_; }
  long long tokens() const { return tokens_; }

 private:
  double nll_ = 0;
  long long tokens_ = 0;
};

}  // namespace

void add_perplexity_command(CLI::App& app, PerplexityOptions& o) {
  CLI::App* c = app.add_subcommand("perplexity", "Perplexity of a text file (sliding window)");
  c->add_option("--model", o.run.model, "Hugging Face LLaMA model directory")->required();
  c->add_option("--input", o.run.input, "Text file (read whole, tokenized as one text)")->required();
  c->add_option("--output", o.json, "Also write the result as JSON to this file");
  c->add_option("--context-len", o.context_len, "Tokens per window, BOS included (default: the model's context)")
      ->check(at_least(2));
  c->add_option("--stride", o.stride, "Tokens between window starts (default: half the window)")->check(at_least(1));
  c->add_option("--max-seqs", o.run.max_seqs, "Windows in flight at once")->capture_default_str()->check(at_least(1));
  c->add_option("--max-batch-tokens", o.run.max_batch_tokens, "Tokens per forward step")->capture_default_str()->check(at_least(1));
  add_log_interval_option(*c, o.run);
  add_layout_options(*c, o.run);
}

int perplexity_command(PerplexityOptions o, const MpiSession& mpi) {
  o.run.output = o.json.empty() ? "/dev/null" : o.json;
  NllSink sink;
  int window = 0, stride = 0;
  RunHooks hooks;
  hooks.sink = &sink;
  hooks.outputs = {{"--output", o.json}};
  hooks.context_len = o.context_len;
  hooks.context_flag = "--context-len";
  hooks.resumable = false;
  hooks.make_source = [&](const Tokenizer* tok, const LlamaConfig& config, int context) {
    std::ifstream in(o.run.input, std::ios::binary);
    if (!in) fail("cannot open ", o.run.input);
    std::stringstream text;
    text << in.rdbuf();
    if (o.context_len > context)
      log::warn("--context-len " + std::to_string(o.context_len) + " is beyond the model's context: windows of " +
                std::to_string(context) + " tokens");
    window = context - 1;  // the run's context is already --context-len where that is smaller; room for BOS
    if (window < 1) fail("--context-len ", o.context_len, " leaves no room for a token after BOS");
    stride = o.stride > 0 ? std::min(o.stride, window) : std::max(1, window / 2);
    if (o.stride > window)
      log::warn("--stride " + std::to_string(o.stride) + " would skip tokens between windows of " +
                std::to_string(window) + " text tokens: stride " + std::to_string(window));
    std::vector<int> tokens = tok->encode(text.str());
    if (tokens.empty()) fail(o.run.input, " holds no tokens");
    auto source = std::make_unique<WindowSource>(std::move(tokens), config.bos_token_id, window, stride);
    hooks.total_requests = source->total();
    return source;
  };
  const int rc = run_engine(o.run, mpi, &hooks);
  if (mpi.rank() != 0 || rc != 0) return rc;
  const double mean = sink.tokens() > 0 ? sink.nll() / static_cast<double>(sink.tokens()) : 0.0;
  nlohmann::json result = {{"tokens", sink.tokens()},     {"mean_nll", mean}, {"perplexity", std::exp(mean)},
                           {"context_len", window + 1}, {"stride", stride}};
  std::printf("perplexity %.6f over %lld tokens (mean NLL %.6f nats; windows of %d tokens, stride %d)\n",
              std::exp(mean), sink.tokens(), mean, window + 1, stride);
  if (!o.json.empty()) write_json_file(o.json, result, "--output");
  return 0;
}

}  // namespace tpllama
