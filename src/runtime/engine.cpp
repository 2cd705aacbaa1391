// The batch loop on rank 0. Each turn: admit requests into free sequence slots; if fewer than
// `groups` micro-batches are in flight, plan one from the sequences not in flight (decodes first,
// then prefill chunks, within the token budget and the KV blocks) and submit it; otherwise wait
// for the oldest group's tokens, apply them and retire finished sequences.
#include "runtime/engine.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "runtime/progress.h"
#include "runtime/sampler.h"

namespace tpllama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Sequence {
  Request request;
  uint64_t order = 0;           // position among the records of this run (for --ordered)
  std::vector<int32_t> tokens;  // prompt (with BOS) followed by generated tokens
  int n_prompt = 0;
  int n_computed = 0;  // positions already in the KV cache
  int slot = -1;
  int n_generated = 0;
  Rng rng;
  IncrementalDetokenizer detok;
  std::string text;
  std::string finish_reason;  // empty while running
  int scheduled = 0;          // tokens of this sequence in its group in flight
  bool in_flight = false;
  std::vector<int32_t> blocks;  // its KV block table (rank 0's copy)
  std::vector<TokenLogprob> logprobs;
  int n_context = 0;   // scoring: tokens before the continuation (BOS included)
  ScoreResult score;   // scoring: accumulated over the continuation
  Clock::time_point admitted = Clock::now();
  Clock::time_point first_token;

  Sequence(Request r, const Tokenizer* tok) : request(std::move(r)), rng(request.sampling.seed), detok(tok) {}
};

struct Group {
  int64_t id = 0;
  std::vector<Sequence*> members;  // every sequence with tokens in the group
  std::vector<Sequence*> rows;     // the sequences owning each logit row, in row order
  int prefill_tokens = 0;          // prompt tokens in the group
  int decode_tokens = 0;
  long long decode_context = 0;    // positions its decode tokens attend to
};

// Finds the earliest stop string that ends inside the text added since `from`.
size_t find_stop(const std::string& text, size_t from, const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    size_t start = from >= s.size() ? from - s.size() + 1 : 0;
    size_t at = text.find(s, start);
    if (at != std::string::npos) best = std::min(best, at);
  }
  return best;
}

std::string line_prefix(const Request& r) { return "line " + std::to_string(r.line) + ": "; }

// Counts each record as it reaches the output (with --ordered, that can be well after it finished,
// or, after a stop, never).
class CountingSink final : public ResultSink {
 public:
  CountingSink(ResultSink& inner, RunSummary& summary) : inner_(inner), summary_(summary) {}
  void write(const Result& r) override {
    inner_.write(r);
    ++summary_.requests;
    if (r.finish_reason == "error")
      ++summary_.errors;
    else if (r.score)
      ++summary_.scored;
    else
      (r.finish_reason == "stop" ? summary_.finished_stop : summary_.finished_length)++;
  }
  void sync() override { inner_.sync(); }

 private:
  ResultSink& inner_;
  RunSummary& summary_;
};

// The state of one run, with the loop split into its steps.
class Run {
 public:
  Run(const LlamaConfig& config, const Tokenizer* tokenizer, Pipeline& pipeline, const EngineOptions& options,
      const EngineIo& io)
      : config_(config),
        tok_(tokenizer),
        pipeline_(pipeline),
        o_(options),
        io_(io),
        bs_(options.kv_block_size),
        seqs_per_group_((options.max_seqs + options.groups - 1) / options.groups),
        slot_used_(static_cast<size_t>(options.max_seqs), false),
        progress_(io.total_requests, io.terminal, options.log_interval) {
    for (int b = o_.kv_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
    if (io.ordered) ordered_ = std::make_unique<OrderedResultWriter>(sink_);
    if (io.resume != nullptr) {
      remaining_done_ = std::move(io.resume->done);
      resumed_records_ = std::move(io.resume->by_id);
      resumed_path_ = io.resume->path;
    }
  }

  RunSummary run() {
    bool estimated = false;
    while (true) {
      check_stop();
      if (abandon_) break;
      admit_while_room();
      if (!estimated) {
        log_kv_estimate();
        estimated = true;
      }
      if (active_.empty() && in_flight_.empty()) break;
      StepPlan plan;
      Group group;
      if (static_cast<int>(in_flight_.size()) < o_.groups) {
        TraceSpan span(io_.trace, "plan a group", TraceTrack::kSchedule);
        plan_group(plan, group);
      }
      if (!group.members.empty()) {
        plan.group = group.id = next_group_++;
        plan.cache_ops.swap(cache_ops_);
        ++summary_.steps;
        if (in_flight_.empty()) step_mark_ = Clock::now();  // the pipeline was idle until now
        if (std::optional<SampledRows> rows = pipeline_.submit(plan))
          apply(group, *rows);
        else
          in_flight_.push_back(std::move(group));
      } else {
        TPLLAMA_CHECK(!in_flight_.empty(), "no group to plan and none in flight with ", active_.size(),
                      " active and ", free_blocks_.size(), " free KV blocks");
        Group done = std::move(in_flight_.front());
        in_flight_.pop_front();
        apply(done, pipeline_.receive_tokens(done.id));
      }
      progress_.update(counts());
    }
    drain_in_flight();
    pipeline_.shutdown();
    sink_.sync();
    if (ordered_) summary_.unwritten = static_cast<long long>(ordered_->buffered());
    progress_.finish(counts());
    // Read to its end, the input asked for none of what is left to skip: records of another job.
    if (input_done_ && summary_.stopped_by == 0)
      for (const auto& entry : remaining_done_) summary_.unmatched_records += entry.second;
    summary_.seconds = seconds_between(start_, Clock::now());
    return std::move(summary_);
  }

 private:
  ProgressCounts counts() const {
    return {finished_ + summary_.skipped, summary_.errors, static_cast<long long>(active_.size()), sampled_tokens_};
  }

  // Once the first requests are in: how many sequences of their average length (prompt plus
  // requested completion, capped at the context) the KV cache holds at once.
  void log_kv_estimate() const {
    if (active_.empty()) return;
    double total = 0;
    for (const auto& s : active_) {
      const int completion = s->request.scoring ? 0 : s->request.max_tokens;
      total += std::min<double>(o_.context, static_cast<double>(s->n_prompt) + completion);
    }
    const double avg = total / static_cast<double>(active_.size());
    const double capacity = static_cast<double>(o_.kv_blocks) * bs_;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(0);
    os << "KV cache: " << capacity << " tokens; at the average request length of the first " << active_.size()
       << " requests (" << avg << " tokens, prompt + max_tokens) it holds about "
       << std::floor(KvCache::sequences_held(o_.kv_blocks, bs_, avg)) << " sequences at once (--max-seqs " << o_.max_seqs
       << ")";
    log::info(os.str());
  }

  // A stop signal: admit nothing more, let the sequences in flight finish within the grace
  // period, then abandon the rest (--resume redoes them).
  void check_stop() {
    const int signal = stop_signal();
    if (signal == 0) return;
    if (summary_.stopped_by == 0) {
      summary_.stopped_by = signal;
      stop_time_ = Clock::now();
      input_done_ = true;
      log::warn("received signal " + std::to_string(signal) + ": admitting no more requests; finishing the " +
                std::to_string(active_.size()) + " running within " + std::to_string(static_cast<int>(o_.grace_seconds)) +
                " s, then stopping (" + (o_.resumable ? "resume with --resume" : o_.restart_hint) +
                "); a second signal stops at once");
    }
    const bool again = stop_signals_received() > 1;  // a second signal: stop now
    if ((again || seconds_between(stop_time_, Clock::now()) > o_.grace_seconds) && !active_.empty()) {
      if (again)
        log::warn("a second stop signal: stopping now, abandoning the " + std::to_string(active_.size()) +
                  " running requests");
      summary_.abandoned = static_cast<long long>(active_.size());
      abandon_ = true;
    }
  }

  // Groups still in flight must come back before the pipeline can shut down.
  void drain_in_flight() {
    while (!in_flight_.empty()) {
      Group done = std::move(in_flight_.front());
      in_flight_.pop_front();
      pipeline_.receive_tokens(done.id);
    }
  }

  void write(uint64_t order, Result r) {
    ++finished_;
    if (ordered_)
      ordered_->submit(order, std::move(r));
    else
      sink_.write(r);
  }

  void reject(const Request& r, uint64_t order, int prompt_tokens, const std::string& message) {
    Result res;
    res.id = r.id;
    res.prompt_tokens = prompt_tokens;
    res.finish_reason = "error";
    res.error = message;
    res.line = r.line;
    write(order, std::move(res));
  }

  bool room_to_admit() const {
    if (input_done_ || static_cast<int>(active_.size()) >= o_.max_seqs) return false;
    return !ordered_ || ordered_->buffered() < io_.reorder_limit;
  }

  void admit_while_room() {
    while (room_to_admit()) {
      std::optional<Request> req = io_.reader->next();
      if (!req) {
        input_done_ = true;
        return;
      }
      admit(std::move(*req));
    }
  }

  // Resumed runs skip what the output already holds: results by id (the first k occurrences of an
  // id written k times), error records by input line. A request skipped by id is first checked
  // against its record (the first kCheckedResumes of them: tokenizing costs), when given.
  bool already_written(const std::string& key, const Request* by_id = nullptr) {
    auto done = remaining_done_.find(key);
    if (done == remaining_done_.end() || done->second == 0) return false;
    auto records = by_id != nullptr ? resumed_records_.find(key) : resumed_records_.end();
    if (records != resumed_records_.end() && checked_resumes_ < kCheckedResumes) {
      const size_t occurrence = records->second.size() - static_cast<size_t>(done->second);
      if (occurrence < records->second.size() && records->second[occurrence].tokens >= 0) {
        ++checked_resumes_;
        check_resumed(*by_id, records->second[occurrence]);
      }
    }
    --done->second;
    ++summary_.skipped;
    return true;
  }

  // A request this run would skip as answered gives the token count its record gives, or the
  // output is another input's (or was made with another tokenizer): taking its records for this
  // input's would leave requests unanswered without a word, so the run stops (before any work
  // when, as after a kill, the answered requests lead the input).
  void check_resumed(const Request& req, const ResumedRecord& record) {
    std::vector<int32_t> tokens;
    int n_context = 0;
    tokenize(req, tokens, n_context);
    const long long mine = static_cast<long long>(tokens.size()) - (req.scoring ? n_context : 0);
    if (record.scoring == req.scoring && record.tokens == mine) return;
    const auto what = [](bool scoring, long long n) {
      return scoring ? "a scoring request with " + std::to_string(n) + " continuation tokens"
                     : "a " + std::to_string(n) + "-token prompt";
    };
    fail("--resume: line ", record.line, " of ", resumed_path_, " answers id ", id_key(req.id), " for ",
         what(record.scoring, record.tokens), ", but this input's line ", req.line, " with that id is ",
         what(req.scoring, mine),
         ": the output was made from another input, or with another tokenizer. Resume with the input and model "
         "that made it, or write to a new --output");
  }

  void admit(Request req) {
    if (!req.error.empty()) {  // its id may be made up from the line number: keep it out of seen_
      if (!already_written(error_line_key(req.line))) reject(req, next_order_++, 0, req.error);
      return;
    }
    const std::string key = id_key(req.id);
    const uint32_t first_line = seen_.insert(key, static_cast<uint32_t>(req.line));
    if (first_line != 0) {
      if (!already_written(error_line_key(req.line)))
        reject(req, next_order_++, 0, line_prefix(req) + "duplicate id " + key + " (first on line " +
                                          std::to_string(first_line) + "); ids must be unique");
      return;
    }
    // A valid line's record is keyed by its id, or by its line when it became an error later on
    // (a prompt longer than the context).
    if (already_written(error_line_key(req.line)) || already_written(key, &req)) return;
    const uint64_t order = next_order_++;
    auto seq = std::make_unique<Sequence>(std::move(req), tok_);
    seq->order = order;
    tokenize(*seq);
    const std::vector<int>& ids = seq->request.token_ids;
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= config_.vocab_size)
        return reject(seq->request, order, 0,
                      line_prefix(seq->request) + "token id " + std::to_string(ids[i]) + " (element " + std::to_string(i) +
                          " of the prompt) is outside the model's vocabulary of " + std::to_string(config_.vocab_size) +
                          " tokens");
    if (seq->request.scoring && !scoring_split_ok(*seq)) return;
    if (seq->n_prompt == 0)
      return reject(seq->request, order, 0,
                    line_prefix(seq->request) + "the prompt is empty and the model adds no BOS token: nothing to condition on");
    if (seq->request.scoring && seq->n_prompt > o_.context)
      return reject(seq->request, order, seq->n_prompt,
                    line_prefix(seq->request) + "context and continuation have " + std::to_string(seq->n_prompt) +
                        " tokens (with BOS) but the context is " + std::to_string(o_.context) +
                        " tokens: the continuation cannot be scored whole");
    if (!seq->request.scoring && seq->n_prompt >= o_.context)
      return reject(seq->request, order, seq->n_prompt,
                    line_prefix(seq->request) + "prompt has " + std::to_string(seq->n_prompt) +
                        " tokens (with BOS) but the context is " + std::to_string(o_.context) +
                        " tokens, leaving no room to generate");
    summary_.prompt_tokens += seq->n_prompt;
    seq->detok.prime(seq->tokens);
    seq->slot = static_cast<int>(std::find(slot_used_.begin(), slot_used_.end(), false) - slot_used_.begin());
    slot_used_[static_cast<size_t>(seq->slot)] = true;
    active_.push_back(std::move(seq));
  }

  // The tokens the model is given: token ids as given, else BOS (when the model adds one) and the
  // prompt's encoding. Scoring requests are tokenized as evaluation harnesses do: context and
  // continuation encoded together, split where the context's own encoding ends.
  void tokenize(const Request& r, std::vector<int32_t>& tokens, int& n_context) const {
    if (!r.token_ids.empty()) {
      tokens.assign(r.token_ids.begin(), r.token_ids.end());
      if (r.scoring) n_context = r.n_context_tokens;
    } else {
      if (o_.add_bos) tokens.push_back(config_.bos_token_id);
      const size_t bos = tokens.size();
      for (int id : encode(r.scoring ? r.context + r.continuation : r.prompt)) tokens.push_back(id);
      if (r.scoring) n_context = static_cast<int>(bos + (r.context.empty() ? 0 : encode(r.context).size()));
    }
  }
  void tokenize(Sequence& s) const {
    tokenize(s.request, s.tokens, s.n_context);
    s.n_prompt = static_cast<int>(s.tokens.size());
  }

  // Whether a scoring request has a context and a continuation after it; rejected if not.
  bool scoring_split_ok(Sequence& s) {
    const Request& r = s.request;
    if (s.n_context < 1 || s.n_context >= static_cast<int>(s.tokens.size())) {
      reject(r, s.order, static_cast<int>(s.tokens.size()),
             line_prefix(r) + (s.n_context < 1 ? "the context is empty and the model adds no BOS token"
                                               : "the continuation adds no token after the context"));
      return false;
    }
    return true;
  }

  std::vector<int> encode(const std::string& text) const {
    TPLLAMA_CHECK(tok_ != nullptr, "a text request reached an engine without a tokenizer");
    return tok_->encode(text);
  }

  void release_blocks(Sequence& s) {
    if (s.blocks.empty()) return;
    cache_ops_.push_back({s.slot, CacheOp::kRelease});
    free_blocks_.insert(free_blocks_.end(), s.blocks.rbegin(), s.blocks.rend());
    s.blocks.clear();
  }

  // Frees blocks for `s` by preempting the youngest sequence admitted after it that is not in
  // flight; the victim recomputes its tokens later. False when there is none.
  bool preempt_younger_than(const Sequence& s) {
    for (auto it = active_.rbegin(); it != active_.rend() && it->get() != &s; ++it) {
      Sequence& victim = **it;
      if (victim.in_flight || victim.blocks.empty()) continue;
      release_blocks(victim);
      victim.n_computed = 0;
      ++summary_.preemptions;
      return true;
    }
    return false;
  }

  // Gives `s` the blocks for `take` more positions; returns how many it can have.
  int reserve_blocks(Sequence& s, int take) {
    auto blocks_for = [&](int positions) { return (positions + bs_ - 1) / bs_ - static_cast<int>(s.blocks.size()); };
    while (blocks_for(s.n_computed + take) > static_cast<int>(free_blocks_.size()) && preempt_younger_than(s)) {
    }
    take = std::min(take, static_cast<int>(s.blocks.size() + free_blocks_.size()) * bs_ - s.n_computed);
    for (int n = blocks_for(s.n_computed + take); n > 0; --n) {
      s.blocks.push_back(free_blocks_.back());
      free_blocks_.pop_back();
      cache_ops_.push_back({s.slot, s.blocks.back()});
    }
    return std::max(take, 0);
  }

  // The first position of a scoring request whose logits are still to score: position p predicts
  // token p + 1 of the continuation. A preempted request recomputes its positions from 0, and
  // those it already scored must not be scored again.
  static int first_unscored(const Sequence& s) { return s.n_context - 1 + s.score.n_tokens; }

  // Scoring rows of positions [from, to).
  static int scoring_rows(const Sequence& s, int from, int to) {
    const int first = std::max(from, first_unscored(s)), last = std::min(to, static_cast<int>(s.tokens.size()) - 1);
    return std::max(0, last - first);
  }

  // Shrinks a chunk so its logit rows fit in rows_left; 0 when none fits.
  int fit_rows(const Sequence& s, int take, int pending, int rows_left) const {
    if (!s.request.scoring) return take == pending && rows_left < 1 ? 0 : take;
    while (take > 0 && scoring_rows(s, s.n_computed, s.n_computed + take) > rows_left) --take;
    return take;
  }

  // One group from the sequences not in flight: decodes first, then prefill chunks.
  void plan_group(StepPlan& plan, Group& group) {
    int budget = o_.max_batch_tokens;
    int rows_left = o_.max_logit_rows;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& s : active_) {
        const bool decoding = s->n_computed >= s->n_prompt;
        if (s->in_flight || (pass == 0) != decoding || budget == 0) continue;
        if (static_cast<int>(group.members.size()) >= seqs_per_group_) return;
        const int pending = static_cast<int>(s->tokens.size()) - s->n_computed;
        const int fitting = fit_rows(*s, std::min(pending, budget), pending, rows_left);
        const int take = fitting == 0 ? 0 : reserve_blocks(*s, fitting);
        if (take == 0) continue;  // waits for blocks held by sequences in flight, or for rows
        for (int i = 0; i < take; ++i) {
          const int p = s->n_computed + i;
          plan.batch.tokens.push_back(s->tokens[static_cast<size_t>(p)]);
          plan.batch.positions.push_back(p);
          plan.batch.slots.push_back(s->slot);
          if (s->request.scoring && p >= first_unscored(*s) && p + 1 < static_cast<int>(s->tokens.size())) {
            plan.batch.logit_rows.push_back(static_cast<int32_t>(plan.batch.positions.size()) - 1);
            plan.sampling.push_back({SamplingParams{}, 0.0, -1, s->tokens[static_cast<size_t>(p) + 1]});
            group.rows.push_back(s.get());
            --rows_left;
          }
        }
        if (take == pending && !s->request.scoring) {
          plan.batch.logit_rows.push_back(static_cast<int32_t>(plan.batch.positions.size()) - 1);
          const SamplingParams& p = s->request.sampling;
          plan.sampling.push_back({p, p.temperature > 0 ? s->rng.uniform() : 0.0, s->request.logprobs, -1});
          group.rows.push_back(s.get());
          --rows_left;
        }
        if (decoding) {
          group.decode_tokens += take;
          group.decode_context += s->n_computed + take;
        } else {
          group.prefill_tokens += take;
        }
        s->scheduled = take;
        s->in_flight = true;
        group.members.push_back(s.get());
        budget -= take;
      }
    }
  }

  std::string token_text(int id) const {
    if (tok_ == nullptr || id < 0 || id >= tok_->vocab_size()) return "";
    return tok_->is_control(id) ? tok_->processor().IdToPiece(id) : token_display_text(tok_->token_bytes(id));
  }

  void record_logprobs(Sequence& s, const RowLogprobs& l, int token) {
    TokenLogprob t;
    t.token = token_text(token);
    t.logprob = l.logprob;
    for (size_t j = 0; j < l.top_tokens.size(); ++j) t.top.emplace_back(token_text(l.top_tokens[j]), l.top_logprobs[j]);
    s.logprobs.push_back(std::move(t));
  }

  // One continuation token of a scoring request: its logprob, and whether it was the argmax.
  void score_token(Sequence& s, const RowLogprobs& l, int argmax_token) {
    const int target = s.tokens[static_cast<size_t>(s.n_context + s.score.n_tokens)];
    s.score.logprob += l.logprob;
    s.score.is_greedy = s.score.is_greedy && argmax_token == target;
    if (s.request.logprobs >= 0) s.score.token_logprobs.push_back(l.logprob);
    ++s.score.n_tokens;
  }

  // A sampled token: stop ids, stop strings, max_tokens, context.
  void accept_token(Sequence& s, int token) {
    ++sampled_tokens_;
    s.tokens.push_back(token);
    if (s.n_generated++ == 0) s.first_token = Clock::now();
    const auto& eos = config_.eos_token_ids;
    if (!s.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      s.finish_reason = "stop";
    } else {
      const size_t before = s.text.size();
      if (tok_ != nullptr && token < tok_->vocab_size()) s.text += s.detok.push(token);  // else a padding id
      const size_t at = find_stop(s.text, before, s.request.stop);
      if (at != std::string::npos) {
        s.text.resize(at);
        s.finish_reason = "stop";
      }
    }
    if (s.finish_reason.empty() &&
        (s.n_generated >= s.request.max_tokens || static_cast<int>(s.tokens.size()) >= o_.context)) {
      s.text += s.detok.flush();
      s.finish_reason = "length";
    }
  }

  void time_step(const Group& group) {
    const auto now = Clock::now();
    const double dt = seconds_between(step_mark_, now);
    step_mark_ = now;
    if (group.prefill_tokens > 0) {
      summary_.prefill_seconds += dt;
      summary_.prefill_step_tokens += group.prefill_tokens;
    } else {
      summary_.decode_seconds += dt;
      summary_.decode_step_tokens += group.decode_tokens;
      summary_.decode_context_tokens += group.decode_context;
      ++summary_.decode_steps;
    }
  }

  void apply(const Group& group, const SampledRows& rows) {
    TraceSpan span(io_.trace, "apply tokens", TraceTrack::kSchedule);
    TPLLAMA_CHECK(rows.tokens.size() == group.rows.size(), rows.tokens.size(), " tokens for ", group.rows.size(), " rows");
    time_step(group);
    for (Sequence* s : group.members) {
      s->n_computed += s->scheduled;
      s->scheduled = 0;
      s->in_flight = false;
    }
    std::vector<const RowLogprobs*> by_row(group.rows.size(), nullptr);
    for (const RowLogprobs& l : rows.logprobs) by_row.at(static_cast<size_t>(l.row)) = &l;
    for (size_t r = 0; r < group.rows.size(); ++r) {
      Sequence& s = *group.rows[r];
      if (s.request.scoring) {
        TPLLAMA_CHECK(by_row[r] != nullptr, "scoring row ", r, " came back without its logprob");
        score_token(s, *by_row[r], rows.tokens[r]);
        continue;
      }
      if (by_row[r] != nullptr) record_logprobs(s, *by_row[r], rows.tokens[r]);
      accept_token(s, rows.tokens[r]);
    }
    for (Sequence* s : group.members)
      if (s->request.scoring && s->n_computed == static_cast<int>(s->tokens.size())) s->finish_reason = "score";
    retire_finished();
  }

  void retire_finished() {
    for (auto it = active_.begin(); it != active_.end();) {
      Sequence& s = **it;
      if (s.finish_reason.empty()) {
        ++it;
        continue;
      }
      Result result;
      result.id = s.request.id;
      result.text = s.text;
      result.prompt_tokens = s.n_prompt;
      result.completion_tokens = s.n_generated;
      result.finish_reason = s.finish_reason;
      if (s.request.logprobs >= 0 && !s.request.scoring) result.logprobs = std::move(s.logprobs);
      if (s.request.scoring) result.score = std::move(s.score);
      summary_.generated_tokens += s.n_generated;
      if (s.n_generated > 0) summary_.ttft.add(seconds_between(s.admitted, s.first_token));
      if (s.n_generated > 1) summary_.tpot.add(seconds_between(s.first_token, Clock::now()) / (s.n_generated - 1));
      if (s.n_generated > 0) summary_.ttft_from_start.add(seconds_between(start_, s.first_token));
      summary_.latency_from_start.add(seconds_between(start_, Clock::now()));
      write(s.order, std::move(result));
      slot_used_[static_cast<size_t>(s.slot)] = false;
      release_blocks(s);
      it = active_.erase(it);
    }
  }

  const LlamaConfig& config_;
  const Clock::time_point start_ = Clock::now();  // the run's start: when an offline batch's requests all arrive
  Clock::time_point step_mark_;  // end of the last timed step
  const Tokenizer* tok_;  // null: requests carry token ids, results carry no text
  Pipeline& pipeline_;
  const EngineOptions& o_;
  const EngineIo& io_;
  const int bs_;
  const int seqs_per_group_;
  RunSummary summary_;
  CountingSink sink_{*io_.writer, summary_};  // every record goes out through it
  long long finished_ = 0;                     // results of this run: written, or held for --ordered
  long long sampled_tokens_ = 0;               // generated so far, running requests' included (progress)
  std::deque<std::unique_ptr<Sequence>> active_;
  std::deque<Group> in_flight_;
  std::vector<bool> slot_used_;
  std::vector<CacheOp> cache_ops_;  // block table changes for the next plan, in order
  std::vector<int32_t> free_blocks_;
  std::unique_ptr<OrderedResultWriter> ordered_;
  std::unordered_map<std::string, int> remaining_done_;  // --resume: records still to skip per id
  std::unordered_map<std::string, std::vector<ResumedRecord>> resumed_records_;  // --resume: by id
  std::string resumed_path_;
  static constexpr int kCheckedResumes = 1000;
  int checked_resumes_ = 0;
  IdIndex seen_;  // id → line it first appeared on
  Progress progress_;
  bool input_done_ = false;
  bool abandon_ = false;
  Clock::time_point stop_time_;
  int64_t next_group_ = 0;
  uint64_t next_order_ = 0;
};

}  // namespace

std::string RunSummary::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << requests << " requests (" << finished_stop << " stop, " << finished_length << " length, ";
  if (scored > 0) os << scored << " scored, ";
  os << errors << " errors) in " << seconds << " s; prompt tokens " << prompt_tokens << ", generated tokens "
     << generated_tokens << " (" << (seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0.0)
     << " tok/s), " << steps << " steps, " << preemptions << " preemptions";
  if (skipped > 0) os << "; " << skipped << " already in the output, skipped";
  if (stopped_by != 0)
    os << "; stopped early by signal " << stopped_by << " (" << abandoned << " unfinished requests abandoned)";
  if (unwritten > 0)
    os << "; " << unwritten << " finished results, held back for --ordered behind those, not written (--resume "
       << "recomputes them, keeping the output in input order)";
  return os.str();
}

Engine::Engine(const LlamaConfig& config, const Tokenizer* tokenizer, Pipeline& pipeline, EngineOptions options)
    : config_(config), tokenizer_(tokenizer), pipeline_(pipeline), options_(options) {
  if (options.max_seqs < 1) fail("--max-seqs must be at least 1, got ", options.max_seqs);
  if (options.max_batch_tokens < 1) fail("--max-batch-tokens must be at least 1, got ", options.max_batch_tokens);
  if (options.groups < 1) fail("micro-batch groups must be at least 1, got ", options.groups);
  if (options_.context <= 0 || options_.context > config.max_seq_len) options_.context = config.max_seq_len;
  const int full = (options_.context + options_.kv_block_size - 1) / options_.kv_block_size;
  if (options_.kv_blocks < full)
    fail("the KV cache holds ", options_.kv_blocks, " blocks of ", options_.kv_block_size, " tokens, less than one ",
         options_.context, "-token sequence needs (", full, "): give more --kv-cache-memory or a smaller --max-model-len");
}

RunSummary Engine::run(const EngineIo& io) {
  TPLLAMA_CHECK(io.reader != nullptr && io.writer != nullptr, "engine without reader or writer");
  Run run(config_, tokenizer_, pipeline_, options_, io);
  return run.run();
}

}  // namespace tpllama
