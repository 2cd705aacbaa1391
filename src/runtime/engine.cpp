// The batch loop. Each step: admit new requests into free slots, plan which tokens of which
// sequences to compute within the token budget (decodes first, then prefill chunks), run the
// model, sample the sequences that reached their last known token, retire finished ones.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "runtime/sampler.h"

namespace tpllama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Sequence {
  Request request;
  std::vector<int32_t> tokens;  // prompt (with BOS) followed by generated tokens
  int n_prompt = 0;
  int n_computed = 0;           // positions already in the KV cache
  int slot = -1;
  int n_generated = 0;
  Rng rng;
  IncrementalDetokenizer detok;
  std::string text;
  std::string finish_reason;  // empty while running
  int scheduled = 0;          // tokens of this sequence in the current step

  Sequence(Request r, const Tokenizer& tok) : request(std::move(r)), rng(request.sampling.seed), detok(tok) {}
};

Result error_result(const Request& r, int prompt_tokens, const std::string& message) {
  Result res;
  res.id = r.id;
  res.prompt_tokens = prompt_tokens;
  res.finish_reason = "error";
  res.error = message;
  return res;
}

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

}  // namespace

std::string RunSummary::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << requests << " requests (" << finished_stop << " stop, " << finished_length << " length, " << errors
     << " errors) in " << seconds << " s; prompt tokens " << prompt_tokens << ", generated tokens "
     << generated_tokens << " (" << (seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0.0)
     << " tok/s), " << steps << " steps";
  return os.str();
}

Engine::Engine(LlamaModel& model, const Tokenizer& tokenizer, EngineOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      cache_(model.n_layers_local(), model.kv_dim_local(), options.max_seqs) {
  if (options.max_seqs < 1) fail("--max-seqs must be at least 1, got ", options.max_seqs);
  if (options.max_batch_tokens < 1) fail("--max-batch-tokens must be at least 1, got ", options.max_batch_tokens);
}

RunSummary Engine::run(PromptReader& reader, ResultWriter& writer) {
  const LlamaConfig& config = model_.config();
  const int ctx_len = config.max_seq_len;
  RunSummary summary;
  const auto start = Clock::now();
  auto last_log = start;
  std::deque<std::unique_ptr<Sequence>> active;
  bool input_done = false;
  StepBatch batch;

  auto finish = [&](Sequence& s) {
    Result r;
    r.id = s.request.id;
    r.text = s.text;
    r.prompt_tokens = s.n_prompt;
    r.completion_tokens = s.n_generated;
    r.finish_reason = s.finish_reason;
    writer.write(r);
    ++summary.requests;
    (s.finish_reason == "stop" ? summary.finished_stop : summary.finished_length)++;
    summary.generated_tokens += s.n_generated;
    cache_.release(s.slot);
  };
  auto reject = [&](const Request& r, int prompt_tokens, const std::string& message) {
    writer.write(error_result(r, prompt_tokens, message));
    ++summary.requests;
    ++summary.errors;
  };

  while (true) {
    // Admit requests while slots are free; invalid ones become error records right away.
    while (!input_done && static_cast<int>(active.size()) < options_.max_seqs) {
      std::optional<Request> req = reader.next();
      if (!req) {
        input_done = true;
        break;
      }
      if (!req->error.empty()) {
        reject(*req, 0, req->error);
        continue;
      }
      auto seq = std::make_unique<Sequence>(std::move(*req), tokenizer_);
      if (options_.add_bos) seq->tokens.push_back(config.bos_token_id);
      for (int id : tokenizer_.encode(seq->request.prompt)) seq->tokens.push_back(id);
      seq->n_prompt = static_cast<int>(seq->tokens.size());
      if (seq->n_prompt == 0) {
        reject(seq->request, 0, "line " + std::to_string(seq->request.line) +
                                    ": the prompt is empty and the model adds no BOS token, so there is nothing to "
                                    "condition on");
        continue;
      }
      if (seq->n_prompt >= ctx_len) {
        reject(seq->request, seq->n_prompt,
               "line " + std::to_string(seq->request.line) + ": prompt has " + std::to_string(seq->n_prompt) +
                   " tokens (with BOS) but the model's context is " + std::to_string(ctx_len) +
                   " tokens, leaving no room to generate");
        continue;
      }
      summary.prompt_tokens += seq->n_prompt;
      seq->detok.prime(seq->tokens);
      seq->slot = cache_.allocate(std::min(ctx_len, seq->n_prompt + seq->request.max_tokens));
      active.push_back(std::move(seq));
    }
    if (active.empty()) break;

    // Plan the step: one token per decoding sequence first, then prefill chunks, within budget.
    batch.clear();
    int budget = options_.max_batch_tokens;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& s : active) {
        const bool decoding = s->n_computed >= s->n_prompt;
        if ((pass == 0) != decoding || budget == 0) continue;
        const int pending = static_cast<int>(s->tokens.size()) - s->n_computed;
        const int take = std::min(pending, budget);
        for (int i = 0; i < take; ++i) {
          batch.tokens.push_back(s->tokens[static_cast<size_t>(s->n_computed + i)]);
          batch.positions.push_back(s->n_computed + i);
          batch.slots.push_back(s->slot);
        }
        if (take == pending) batch.logit_rows.push_back(static_cast<int32_t>(batch.size()) - 1);
        s->scheduled = take;
        budget -= take;
      }
    }

    Tensor logits = model_.forward(batch, cache_);
    ++summary.steps;

    // Sample for every sequence that computed its last token; check its stop conditions.
    size_t row = 0;
    for (auto& s : active) {
      if (s->scheduled == 0) continue;
      s->n_computed += s->scheduled;
      const bool has_logits = s->n_computed == static_cast<int>(s->tokens.size());
      s->scheduled = 0;
      if (!has_logits) continue;
      const float* l = logits.as<float>() + static_cast<int64_t>(row++) * logits.size(1);
      const int token = sample(l, model_.vocab_local(), s->request.sampling, s->rng);
      s->tokens.push_back(token);
      ++s->n_generated;
      const auto& eos = config.eos_token_ids;
      if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
        s->finish_reason = "stop";
      } else {
        const size_t before = s->text.size();
        if (token < tokenizer_.vocab_size()) s->text += s->detok.push(token);  // else a padding id
        size_t at = find_stop(s->text, before, s->request.stop);
        if (at != std::string::npos) {
          s->text.resize(at);
          s->finish_reason = "stop";
        }
      }
      if (s->finish_reason.empty() &&
          (s->n_generated >= s->request.max_tokens || static_cast<int>(s->tokens.size()) >= ctx_len)) {
        s->text += s->detok.flush();
        s->finish_reason = "length";
      }
    }
    TPLLAMA_CHECK(row == batch.logit_rows.size(), "sampled ", row, " rows of ", batch.logit_rows.size());
    for (auto it = active.begin(); it != active.end();) {
      if ((*it)->finish_reason.empty()) {
        ++it;
      } else {
        finish(**it);
        it = active.erase(it);
      }
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
  writer.sync();
  summary.seconds = seconds_since(start);
  return summary;
}

}  // namespace tpllama
