// The batch loop on rank 0. Each turn: admit new requests into free KV slots; if fewer than
// `groups` micro-batches are in flight, plan one from the sequences not in flight (decodes first,
// then prefill chunks, within the token budget) and submit it; otherwise wait for the oldest
// group's tokens, apply them and retire finished sequences.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "runtime/sampler.h"

namespace tpllama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Sequence {
  Request request;
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
  Clock::time_point admitted = Clock::now();
  Clock::time_point first_token;

  Sequence(Request r, const Tokenizer& tok) : request(std::move(r)), rng(request.sampling.seed), detok(tok) {}
};

struct Group {
  int64_t id = 0;
  std::vector<Sequence*> members;  // every sequence with tokens in the group
  std::vector<Sequence*> rows;     // the sequences owning each logit row, in row order
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

}  // namespace

std::string RunSummary::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << requests << " requests (" << finished_stop << " stop, " << finished_length << " length, " << errors
     << " errors) in " << seconds << " s; prompt tokens " << prompt_tokens << ", generated tokens "
     << generated_tokens << " (" << (seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0.0)
     << " tok/s), " << steps << " steps, " << preemptions << " preemptions";
  return os.str();
}

Engine::Engine(const LlamaConfig& config, const Tokenizer& tokenizer, Pipeline& pipeline, EngineOptions options)
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

RunSummary Engine::run(PromptReader& reader, ResultWriter& writer) {
  const int ctx_len = options_.context;
  const int bs = options_.kv_block_size;
  const int seqs_per_group = (options_.max_seqs + options_.groups - 1) / options_.groups;
  RunSummary summary;
  const auto start = Clock::now();
  auto last_log = start;
  std::deque<std::unique_ptr<Sequence>> active;
  std::deque<Group> in_flight;
  std::vector<bool> slot_used(static_cast<size_t>(options_.max_seqs), false);
  std::vector<CacheOp> cache_ops;  // block table changes for the next plan, in order
  std::vector<int32_t> free_blocks;
  for (int b = options_.kv_blocks - 1; b >= 0; --b) free_blocks.push_back(b);
  bool input_done = false;
  int64_t next_group = 0;

  auto reject = [&](const Request& r, int prompt_tokens, const std::string& message) {
    Result res;
    res.id = r.id;
    res.prompt_tokens = prompt_tokens;
    res.finish_reason = "error";
    res.error = message;
    writer.write(res);
    ++summary.requests;
    ++summary.errors;
  };
  auto admit = [&](Request req) {
    if (!req.error.empty()) return reject(req, 0, req.error);
    auto seq = std::make_unique<Sequence>(std::move(req), tokenizer_);
    if (options_.add_bos) seq->tokens.push_back(config_.bos_token_id);
    for (int id : tokenizer_.encode(seq->request.prompt)) seq->tokens.push_back(id);
    seq->n_prompt = static_cast<int>(seq->tokens.size());
    if (seq->n_prompt == 0)
      return reject(seq->request, 0, line_prefix(seq->request) +
                                         "the prompt is empty and the model adds no BOS token: nothing to condition on");
    if (seq->n_prompt >= ctx_len)
      return reject(seq->request, seq->n_prompt,
                    line_prefix(seq->request) + "prompt has " + std::to_string(seq->n_prompt) +
                        " tokens (with BOS) but the model's context is " + std::to_string(ctx_len) +
                        " tokens, leaving no room to generate");
    summary.prompt_tokens += seq->n_prompt;
    seq->detok.prime(seq->tokens);
    seq->slot = static_cast<int>(std::find(slot_used.begin(), slot_used.end(), false) - slot_used.begin());
    slot_used[static_cast<size_t>(seq->slot)] = true;
    active.push_back(std::move(seq));
  };
  auto release_blocks = [&](Sequence& s) {
    if (s.blocks.empty()) return;
    cache_ops.push_back({s.slot, CacheOp::kRelease});
    free_blocks.insert(free_blocks.end(), s.blocks.rbegin(), s.blocks.rend());
    s.blocks.clear();
  };
  // Frees blocks for `s` by preempting the youngest sequence admitted after it that is not in
  // flight; the victim recomputes its tokens later. Returns false when there is none.
  auto preempt_younger_than = [&](const Sequence& s) {
    for (auto it = active.rbegin(); it != active.rend() && it->get() != &s; ++it) {
      Sequence& victim = **it;
      if (victim.in_flight || victim.blocks.empty()) continue;
      release_blocks(victim);
      victim.n_computed = 0;
      ++summary.preemptions;
      return true;
    }
    return false;
  };
  // Gives `s` the blocks for `take` more positions, shrinking take to what can be had.
  auto reserve_blocks = [&](Sequence& s, int take) {
    auto blocks_for = [&](int positions) { return (positions + bs - 1) / bs - static_cast<int>(s.blocks.size()); };
    while (blocks_for(s.n_computed + take) > static_cast<int>(free_blocks.size()) && preempt_younger_than(s)) {
    }
    const int can = (static_cast<int>(s.blocks.size() + free_blocks.size())) * bs - s.n_computed;
    take = std::min(take, can);
    for (int n = blocks_for(s.n_computed + take); n > 0; --n) {
      s.blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
      cache_ops.push_back({s.slot, s.blocks.back()});
    }
    return std::max(take, 0);
  };
  // Plans one group from the sequences not in flight: decodes first, then prefill chunks.
  auto plan_group = [&](StepPlan& plan, Group& group) {
    int budget = options_.max_batch_tokens;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& s : active) {
        const bool decoding = s->n_computed >= s->n_prompt;
        if (s->in_flight || (pass == 0) != decoding || budget == 0) continue;
        if (static_cast<int>(group.members.size()) >= seqs_per_group) return;
        const int pending = static_cast<int>(s->tokens.size()) - s->n_computed;
        const int take = reserve_blocks(*s, std::min(pending, budget));
        if (take == 0) continue;  // waits for blocks held by sequences in flight
        for (int i = 0; i < take; ++i) {
          plan.batch.tokens.push_back(s->tokens[static_cast<size_t>(s->n_computed + i)]);
          plan.batch.positions.push_back(s->n_computed + i);
          plan.batch.slots.push_back(s->slot);
        }
        if (take == pending) {
          plan.batch.logit_rows.push_back(static_cast<int32_t>(plan.batch.positions.size()) - 1);
          const SamplingParams& p = s->request.sampling;
          plan.sampling.push_back({p, p.temperature > 0 ? s->rng.uniform() : 0.0});
          group.rows.push_back(s.get());
        }
        s->scheduled = take;
        s->in_flight = true;
        group.members.push_back(s.get());
        budget -= take;
      }
    }
  };
  // Applies a group's tokens: advance, sample bookkeeping, stop conditions.
  auto apply = [&](const Group& group, const std::vector<int32_t>& tokens) {
    TPLLAMA_CHECK(tokens.size() == group.rows.size(), tokens.size(), " tokens for ", group.rows.size(), " rows");
    for (Sequence* s : group.members) {
      s->n_computed += s->scheduled;
      s->scheduled = 0;
      s->in_flight = false;
    }
    for (size_t r = 0; r < group.rows.size(); ++r) {
      Sequence& s = *group.rows[r];
      const int token = tokens[r];
      s.tokens.push_back(token);
      if (s.n_generated++ == 0) s.first_token = Clock::now();
      const auto& eos = config_.eos_token_ids;
      if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
        s.finish_reason = "stop";
      } else {
        const size_t before = s.text.size();
        if (token < tokenizer_.vocab_size()) s.text += s.detok.push(token);  // else a padding id
        const size_t at = find_stop(s.text, before, s.request.stop);
        if (at != std::string::npos) {
          s.text.resize(at);
          s.finish_reason = "stop";
        }
      }
      if (s.finish_reason.empty() && (s.n_generated >= s.request.max_tokens || static_cast<int>(s.tokens.size()) >= ctx_len)) {
        s.text += s.detok.flush();
        s.finish_reason = "length";
      }
    }
    for (auto it = active.begin(); it != active.end();) {
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
      writer.write(result);
      summary.ttft_seconds.push_back(std::chrono::duration<double>(s.first_token - s.admitted).count());
      if (s.n_generated > 1)
        summary.tpot_seconds.push_back(std::chrono::duration<double>(Clock::now() - s.first_token).count() /
                                       (s.n_generated - 1));
      ++summary.requests;
      (s.finish_reason == "stop" ? summary.finished_stop : summary.finished_length)++;
      summary.generated_tokens += s.n_generated;
      slot_used[static_cast<size_t>(s.slot)] = false;
      release_blocks(s);
      it = active.erase(it);
    }
  };

  while (true) {
    while (!input_done && static_cast<int>(active.size()) < options_.max_seqs) {
      std::optional<Request> req = reader.next();
      if (!req) {
        input_done = true;
        break;
      }
      admit(std::move(*req));
    }
    if (active.empty() && in_flight.empty()) break;

    StepPlan plan;
    Group group;
    if (static_cast<int>(in_flight.size()) < options_.groups) plan_group(plan, group);
    if (!group.members.empty()) {
      plan.group = group.id = next_group++;
      plan.cache_ops.swap(cache_ops);
      ++summary.steps;
      if (std::optional<std::vector<int32_t>> tokens = pipeline_.submit(plan))
        apply(group, *tokens);
      else
        in_flight.push_back(std::move(group));
    } else {
      TPLLAMA_CHECK(!in_flight.empty(), "no group to plan and none in flight with ", active.size(), " active and ",
                    free_blocks.size(), " free KV blocks");
      Group done = std::move(in_flight.front());
      in_flight.pop_front();
      apply(done, pipeline_.receive_tokens(done.id));
    }

    if (seconds_since(last_log) >= options_.log_interval) {
      last_log = Clock::now();
      const double elapsed = seconds_since(start);
      std::ostringstream os;
      os.setf(std::ios::fixed);
      os.precision(1);
      os << "progress: " << summary.requests << " done (" << summary.errors << " errors), " << active.size()
         << " running, " << summary.generated_tokens << " tokens generated, "
         << static_cast<double>(summary.generated_tokens) / elapsed << " tok/s, " << elapsed << " s";
      log::info(os.str());
    }
  }
  pipeline_.shutdown();
  writer.sync();
  summary.seconds = seconds_since(start);
  return summary;
}

}  // namespace tpllama
