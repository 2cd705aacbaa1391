// The batch loop on rank 0. Each turn: admit requests into free sequence slots; if fewer than
// `groups` micro-batches are in flight, plan one from the sequences not in flight and submit it;
// otherwise wait for the oldest group's tokens, apply them and retire finished sequences.
#include "engine/engine.h"

#include <cmath>
#include <set>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "engine/block_allocator.h"
#include "engine/progress.h"
#include "engine/request_intake.h"
#include "engine/result_publisher.h"
#include "engine/scheduler.h"
#include "engine/structured_outputs.h"

namespace tpllama {
namespace {

// One run: the parts, the sequences between them, and the stop.
class Run {
 public:
  Run(const LlamaConfig& config, const ModelText* text, StepExecutor& executor,
      const EngineConfig& o, const EngineIo& io)
      : executor_(executor),
        o_(o),
        io_(io),
        rules_{text ? text->stop_ids() : config.eos_token_ids, o.context},
        structured_(text ? &text->tokenizer() : nullptr, config.vocab_size, rules_),
        gate_(io.reader != nullptr
                  ? std::make_unique<RequestGate>(*io.reader, text, o.context, io.resume)
                  : nullptr),
        intake_(gate_ ? *gate_ : *io.gated, text, {config.vocab_size, o.context, o.max_seqs},
                &structured_),
        blocks_(o.kv_blocks, o.kv_block_size, o.max_seqs, o.prefix_caching),
        scheduler_(
            {o.max_batch_tokens, o.max_logit_rows, o.max_seqs, o.groups, config.sliding_window},
            blocks_, rules_, &structured_),
        publisher_(*io.writer, io.ordered, io.reorder_limit, text ? &text->tokenizer() : nullptr,
                   rules_),
        progress_(io.total_requests, io.terminal, o.log_interval, Progress::kFirstLineSeconds,
                  io.progress_unit) {}

  RunSummary run() {
    bool estimated = false;
    while (true) {
      check_stop();
      if (abandon_) break;
      admit_while_room();
      if (!estimated && !active_.empty()) {
        log_kv_estimate();
        estimated = true;
      }
      if (active_.empty() && scheduler_.idle()) {
        if (intake_.done()) {
          check_stop();  // a stop heard while a request was read (a template's render) closed the
                         // intake
          break;
        }
        // A stream with no whole line yet (admit_while_room waited a quarter second for one):
        // nothing to run until it comes or a stop signal does.
        executor_.keep_alive();
        if (io_.progress) progress_.update(counts());
        continue;
      }
      const bool idle = scheduler_.idle();
      std::optional<StepPlan> plan;
      if (scheduler_.has_room()) {
        TraceSpan span(io_.trace, "plan a group", TraceTrack::kSchedule);
        plan = scheduler_.schedule(active_);
      }
      if (plan) {
        ++summary().steps;
        if (idle) publisher_.start_step_clock();  // the pipeline was idle until now
        if (std::optional<SampledRows> rows = executor_.submit(*plan))
          apply(scheduler_.take_oldest(), *rows);
      } else {
        TPLLAMA_CHECK(!scheduler_.idle(), "no group to plan and none in flight with ",
                      active_.size(), " active and ", blocks_.free_blocks(), " free KV blocks");
        const Group done = scheduler_.take_oldest();
        apply(done, executor_.receive_tokens(done.id));
      }
      if (io_.progress) progress_.update(counts());
    }
    // Groups still in flight must come back before the pipeline can shut down.
    while (!scheduler_.idle()) executor_.receive_tokens(scheduler_.take_oldest().id);
    executor_.shutdown();
    publisher_.finish();
    if (io_.progress) progress_.finish(counts());
    RunSummary& s = summary();
    s.skipped = gate_ ? gate_->skipped() : 0;
    s.preemptions = scheduler_.preemptions();
    s.prefix_caching = o_.prefix_caching;
    s.prefix = blocks_.prefix_stats();
    if (gate_ && intake_.done() && s.stopped_by == 0)
      s.unmatched_records = gate_->unmatched_records();
    const StructuredFigures f = structured_.figures();
    s.structured.requests = f.requests;
    s.structured.grammars_compiled = f.grammars_compiled;
    s.structured.compile_seconds = f.compile_seconds;
    s.structured.masks = f.masks.time;
    s.structured.masks_walked = f.masks.computed;
    return std::move(s);
  }

 private:
  RunSummary& summary() { return publisher_.summary(); }

  ProgressCounts counts() const {
    const PrefixCacheStats p = blocks_.prefix_stats();
    return {publisher_.published() + (gate_ ? gate_->skipped() : 0),
            publisher_.summary().records.errors,
            static_cast<long long>(active_.size()),
            sampled_tokens_,
            scored_tokens_,
            o_.prefix_caching,
            p.prompt_tokens,
            p.hit_tokens,
            p.evicted_blocks};
  }

  // Once the first requests are in: how many sequences of their average length (prompt plus
  // requested completion, capped at the context) the KV cache holds at once.
  void log_kv_estimate() const {
    if (active_.empty()) return;
    double total = 0;
    for (const auto& s : active_) {
      const int completion = s->request().scoring ? 0 : s->request().max_tokens;
      total += std::min<double>(o_.context, static_cast<double>(s->counts().prompt) + completion);
    }
    const double avg = total / static_cast<double>(active_.size());
    const double capacity = static_cast<double>(o_.kv_blocks) * o_.kv_block_size;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(0);
    os << "KV cache: " << capacity << " tokens; at the average request length of the first "
       << active_.size() << " requests (" << avg << " tokens, prompt + max_tokens) it holds about "
       << std::floor(sequences_held(o_.kv_blocks, o_.kv_block_size, avg))
       << " sequences at once (--max-seqs " << o_.max_seqs << ")";
    log::info(os.str());
  }

  // A stop signal: admit nothing more, let the sequences in flight finish within the grace
  // period, then abandon the rest (--resume redoes them).
  void check_stop() {
    const int signal = stop_signal();
    if (signal == 0) return;
    RunSummary& s = summary();
    if (s.stopped_by == 0) {
      s.stopped_by = signal;
      stop_time_ = Clock::now();
      intake_.close();
      log::warn("received signal " + std::to_string(signal) +
                ": admitting no more requests; finishing the " +
                std::to_string(running_requests()) + " running within " +
                std::to_string(static_cast<int>(o_.grace_seconds)) + " s, then stopping (" +
                io_.how_to_continue +
                "); a second signal, 1 s or more after the first, stops at once");
    }
    const bool again = stop_signals_received() > 1;  // a second signal: stop now
    if ((again || seconds_between(stop_time_, Clock::now()) > o_.grace_seconds) &&
        !active_.empty()) {
      if (again)
        log::warn("a second stop signal: stopping now, abandoning the " +
                  std::to_string(running_requests()) + " running requests");
      s.abandoned = running_requests();
      abandon_ = true;
    }
  }

  // Requests with a sequence running (the samples of one are one request).
  long long running_requests() const {
    std::set<uint64_t> orders;
    for (const auto& s : active_) orders.insert(s->counts().order);
    return static_cast<long long>(orders.size());
  }

  // Sequence slots taken, and promised to the samples still to fork from them.
  int slots_taken() const { return static_cast<int>(active_.size()) + promised_forks_; }

  // Requests already read are run at once: a stream that goes quiet is waited on (a quarter second
  // at a time) only when nothing else can go on. A request of n samples waits until n slots are
  // free (the intake refuses n above --max-seqs).
  void admit_while_room() {
    if (summary().stopped_by != 0 && next_) {  // a stop admits nothing (--resume redoes it)
      if (next_->sequence) structured_.release(*next_->sequence);
      next_.reset();
    }
    while (publisher_.has_room()) {
      if (!next_) {
        if (intake_.done() || slots_taken() >= o_.max_seqs) return;
        next_ = intake_.next(/*wait=*/active_.empty() && scheduler_.idle());
        if (!next_) return;
      }
      Admission& a = *next_;
      if (a.rejected) {
        publisher_.publish(a.order, std::move(*a.rejected));
      } else if (a.sequence) {
        const int n = a.sequence->request().n;
        if (slots_taken() + n > o_.max_seqs) return;  // its samples wait for slots
        summary().prompt_tokens += a.sequence->counts().prompt;
        promised_forks_ += a.sequence->counts().forks_left;
        scheduler_.admit(*a.sequence);
        publisher_.open(*a.sequence, a.admitted);
        active_.push_back(std::move(a.sequence));
      }
      next_.reset();
    }
  }

  void apply(const Group& group, const SampledRows& rows) {
    TraceSpan span(io_.trace, "apply tokens", TraceTrack::kSchedule);
    publisher_.step_done(group);
    // A scoring request's logit row scores one continuation token, as do a prompt's first rows
    // when it asks for its log-probabilities (a sequence's rows are consecutive); any other samples
    // one.
    const Sequence* last = nullptr;
    int seen = 0;
    for (const Sequence* row : group.rows) {
      seen = row == last ? seen + 1 : 0;
      last = row;
      (row->request().scoring || seen < prompt_rows_left(*row) ? scored_tokens_
                                                               : sampled_tokens_) += 1;
    }
    AppliedGroup applied = scheduler_.apply(group, rows);
    publisher_.apply(applied.rows, &structured_);
    promised_forks_ -= static_cast<int>(applied.forks.size());
    scheduler_.adopt(std::move(applied.forks), active_);
    for (auto it = active_.begin(); it != active_.end();) {
      Sequence& s = **it;
      if (s.state() != SequenceState::kFinished) {
        ++it;
        continue;
      }
      promised_forks_ -= s.counts().forks_left;  // a first sample that failed forks none
      publisher_.retire(s);
      structured_.release(s);
      scheduler_.retire(s);
      it = active_.erase(it);
    }
  }

  StepExecutor& executor_;
  const EngineConfig& o_;
  const EngineIo& io_;
  const StopRules rules_;
  StructuredOutputs structured_;
  std::unique_ptr<RequestGate> gate_;  // over io.reader; null for gated requests
  RequestIntake intake_;
  BlockAllocator blocks_;
  Scheduler scheduler_;
  ResultPublisher publisher_;
  Progress progress_;
  ActiveSequences active_;
  std::optional<Admission> next_;  // read, and waiting for the slots of its n samples
  int promised_forks_ = 0;         // slots kept for samples not yet forked
  long long sampled_tokens_ = 0;   // generated so far, running requests' included (progress)
  long long scored_tokens_ = 0;    // continuation tokens scored so far (progress)
  bool abandon_ = false;
  Clock::time_point stop_time_;
};

}  // namespace

Engine::Engine(const LlamaConfig& config, const ModelText* text, StepExecutor& executor,
               const EngineConfig& engine)
    : config_(config), text_(text), executor_(executor), engine_(engine) {
  TPLLAMA_CHECK(engine.max_seqs > 0 && engine.max_batch_tokens > 0 && engine.groups > 0 &&
                    engine.context > 0 && engine.context <= config.max_seq_len &&
                    blocks_per_sequence(engine.context, engine.kv_block_size) <= engine.kv_blocks,
                "an engine of ", engine.max_seqs, " sequences, ", engine.max_batch_tokens,
                " tokens a step, ", engine.groups, " groups, a context of ", engine.context,
                " and ", engine.kv_blocks, " KV blocks of ", engine.kv_block_size);
}

RunSummary Engine::run(const EngineIo& io) {
  TPLLAMA_CHECK((io.reader != nullptr) != (io.gated != nullptr) && io.writer != nullptr,
                "an engine needs one source of requests and a writer");
  Run run(config_, text_, executor_, engine_, io);
  return run.run();
}

}  // namespace tpllama
