// Reading, checking and tokenizing requests on rank 0.
#include "engine/request_intake.h"

#include <new>
#include <utility>

#include "core/error.h"
#include "core/stop_signal.h"
#include "engine/structured_outputs.h"

namespace tpllama {
namespace {

std::string line_prefix(const Request& r) {
  return "line " + std::to_string(r.line) + ": ";
}

// The tokens of r (ModelText::encode; text may be null only when r carries token ids), cut to
// the last truncate_prompt_tokens of them (*cut: how many went; a scoring request's context is
// what is cut). With fit, text that cannot fit in the context is refused without being tokenized,
// unless it is to be truncated. Throws PromptError where r cannot become tokens.
std::vector<int32_t> tokenize_request(const Request& r, const ModelText* text, int context,
                                      int* n_context, int* cut, bool fit) {
  TPLLAMA_CHECK(text != nullptr || !r.token_ids.empty(),
                "a text request reached an engine without a tokenizer");
  const int keep = r.truncate_prompt_tokens < 0 ? context : r.truncate_prompt_tokens;
  if (keep > context)  // as vLLM: a truncation the context could never hold (nothing tokenized)
    throw PromptError("field 'truncate_prompt_tokens' is " + std::to_string(keep) +
                      ", more than the context of " + std::to_string(context) +
                      " tokens (--max-model-len)");
  std::vector<int32_t> tokens;
  if (text == nullptr) {
    if (r.scoring) *n_context = r.n_context_tokens;
    tokens.assign(r.token_ids.begin(), r.token_ids.end());
  } else {
    tokens = text->encode(r, n_context, fit && keep == 0 ? context : 0);
  }
  *cut = 0;
  if (keep == 0) return tokens;
  const int n = static_cast<int>(tokens.size());
  if (n <= keep) return tokens;
  *cut = n - keep;
  if (r.scoring) {
    if (*n_context - *cut < 1)
      throw PromptError("truncate_prompt_tokens keeps the last " + std::to_string(keep) + " of " +
                        std::to_string(n) + " tokens, which leaves no context before the " +
                        std::to_string(n - *n_context) + " tokens of the continuation");
    *n_context -= *cut;
  }
  tokens.erase(tokens.begin(), tokens.begin() + *cut);
  return tokens;
}

// Why a token id the request names (its prompt's, logit_bias's, stop_token_ids') is outside a
// vocabulary of `vocab` tokens; "" when none is.
std::string id_outside_vocabulary(const Request& r, int vocab) {
  const auto outside = [&](int64_t id, const std::string& where) {
    return "token id " + std::to_string(id) + " (" + where +
           ") is outside the model's vocabulary of " + std::to_string(vocab) + " tokens";
  };
  for (size_t i = 0; i < r.token_ids.size(); ++i)
    if (r.token_ids[i] < 0 || r.token_ids[i] >= vocab)
      return outside(r.token_ids[i], "element " + std::to_string(i) + " of the prompt");
  for (const auto& [id, bias] : r.logit_rules.logit_bias)
    if (id >= vocab) return outside(id, "a key of logit_bias");
  for (size_t i = 0; i < r.stop_token_ids.size(); ++i)
    if (r.stop_token_ids[i] >= vocab)
      return outside(r.stop_token_ids[i], "element " + std::to_string(i) + " of stop_token_ids");
  return "";
}

// Why n tokens (n_context of them a scoring request's context) cannot be served in a context of
// `context` tokens; "" when they can.
std::string length_error(const Request& req, int n, int n_context, int context) {
  if (req.scoring && (n_context < 1 || n_context >= n))
    return n_context < 1 ? "the context is empty and the model adds no BOS token"
                         : "the continuation adds no token after the context";
  if (n == 0) return "the prompt is empty and the model adds no BOS token: nothing to condition on";
  if (req.scoring && n > context)
    return "context and continuation have " + std::to_string(n) +
           " tokens (with BOS) but the context is " + std::to_string(context) +
           " tokens: the continuation cannot be scored whole";
  if (!req.scoring && n >= context)
    return "prompt has " + std::to_string(n) + " tokens (with BOS) but the context is " +
           std::to_string(context) + " tokens, leaving no room to generate" +
           (req.truncate_prompt_tokens != 0
                ? " (truncate_prompt_tokens " + std::to_string(req.truncate_prompt_tokens) +
                      " kept them: give fewer)"
                : "");
  return "";
}

}  // namespace

RequestGate::RequestGate(RequestSource& source, const ModelText* text, int context,
                         ResumeIndex* resume)
    : source_(source), text_(text), context_(context) {
  if (resume != nullptr) {
    remaining_done_ = std::move(resume->done);
    resumed_records_ = std::move(resume->by_id);
    resumed_path_ = resume->path;
  }
}

std::optional<GatedRequest> RequestGate::next(bool wait) {
  while (std::optional<Request> req = source_.next(wait))
    if (std::optional<GatedRequest> gated = pass(std::move(*req))) return gated;
  return std::nullopt;
}

long long RequestGate::unmatched_records() const {
  long long n = 0;
  for (const auto& entry : remaining_done_) n += entry.second;
  return n;
}

RequestIntake::RequestIntake(GatedSource& source, const ModelText* text,
                             const IntakeOptions& options, StructuredOutputs* structured)
    : source_(source), text_(text), options_(options), structured_(structured) {}

std::optional<Admission> RequestIntake::next(bool wait) {
  if (done_) return std::nullopt;
  std::optional<GatedRequest> req = source_.next(wait);
  if (!req) {
    done_ = source_.ended();
    return std::nullopt;
  }
  try {
    return admit(std::move(*req));
  } catch (const StoppedError&) {
    // A stop signal while a chat template rendered this request: it gets no record (--resume
    // redoes it) and nothing more is admitted; the engine sees the signal and stops.
    close();
    return std::nullopt;
  }
}

Admission RequestIntake::reject(const Request& r, uint64_t order, int prompt_tokens,
                                const std::string& message) const {
  Admission a;
  a.order = order;
  Result& res = a.rejected.emplace();
  res.id = r.id;
  res.chat = r.chat();
  res.prompt_tokens = prompt_tokens;
  res.finish_reason = finish_reason_name(FinishReason::kError);
  res.error = message;
  res.line = r.line;
  res.line_failed = r.line_failed;
  return a;
}

// Resumed runs skip what the output already holds: results by id (the first k occurrences of an id
// written k times), error records by input line.
bool RequestGate::already_written(const std::string& key, const Request* by_id) {
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
  ++skipped_;
  return true;
}

// A request this run would skip as answered gives the token count its record gives
// (check_resumed_record), or the output is another input's.
void RequestGate::check_resumed(const Request& req, const ResumedRecord& record) const {
  int n_context = 0;
  std::vector<int32_t> tokens;
  try {
    int cut = 0;
    tokens = tokenize_request(req, text_, context_, &n_context, &cut, /*fit=*/false);
  } catch (const PromptError&) {
    return;  // its record says so; a template that refuses it now refused it then
  }
  const long long mine = static_cast<long long>(tokens.size()) - (req.scoring ? n_context : 0);
  check_resumed_record(record, resumed_path_, req, mine);
}

std::optional<GatedRequest> RequestGate::pass(Request req) {
  // An id the line gives (or defaults to) is taken even when the line is an error, so no two
  // records share one; an id that could not be read is null and takes none.
  const std::string key = id_key(req.id);
  const uint32_t first_line =
      req.id.is_null() ? 0 : seen_.insert(key, static_cast<uint32_t>(req.line));
  const auto refused = [&](std::string message) {
    GatedRequest g{std::move(req), next_order_++, std::move(message)};
    return std::optional<GatedRequest>(std::move(g));
  };
  if (!req.error.empty()) {
    if (already_written(error_line_key(req.line))) return std::nullopt;
    if (first_line == 0) return refused(req.error);
    return refused(req.error + "; and its id " + key + " repeats line " +
                   std::to_string(first_line) + "'s (ids must be unique)");
  }
  if (first_line != 0) {
    if (already_written(error_line_key(req.line))) return std::nullopt;
    req.line_failed = true;  // no request: its id is another's
    return refused(line_prefix(req) + "duplicate id " + key + " (first on line " +
                   std::to_string(first_line) + "); ids must be unique");
  }
  // A valid line's record is keyed by its id, or by its line when it became an error later on (a
  // prompt longer than the context).
  if (already_written(error_line_key(req.line)) || already_written(key, &req)) return std::nullopt;
  return GatedRequest{std::move(req), next_order_++, std::nullopt};
}

Admission RequestIntake::admit(GatedRequest gated) {
  const Clock::time_point admitted = Clock::now();  // time to first token counts from here
  const uint64_t order = gated.order;
  Request& req = gated.request;
  if (gated.refusal) return reject(req, order, 0, *gated.refusal);
  if (options_.max_seqs > 0 && req.n > options_.max_seqs)
    return reject(req, order, 0,
                  line_prefix(req) + "n is " + std::to_string(req.n) + " but --max-seqs is " +
                      std::to_string(options_.max_seqs) +
                      ": a request's samples run at once, one sequence each; raise --max-seqs to " +
                      std::to_string(req.n) + " or more");
  int n_context = 0;
  std::vector<int32_t> tokens;
  try {
    tokens = tokenize_request(req, text_, options_.context, &n_context, &req.prompt_tokens_cut,
                              /*fit=*/true);
  } catch (const PromptError& e) {
    return reject(req, order, 0, line_prefix(req) + e.what());
  }
  const int n = static_cast<int>(tokens.size());
  if (const std::string outside = id_outside_vocabulary(req, options_.vocab_size); !outside.empty())
    return reject(req, order, 0, line_prefix(req) + outside);
  if (const std::string why = length_error(req, n, n_context, options_.context); !why.empty())
    return reject(req, order, n, line_prefix(req) + why);
  Admission a;
  a.order = order;
  a.admitted = admitted;
  std::optional<OutputConstraint> constraint = req.constraint;
  const auto request = std::make_shared<const Request>(std::move(req));
  a.sequence = std::make_unique<Sequence>(request, std::move(tokens), n_context, order);
  if (constraint) {
    const std::string why =
        structured_ != nullptr
            ? structured_->constrain(*a.sequence, *constraint)
            : "field '" + constraint->field + "': structured outputs need the model's tokenizer";
    if (!why.empty()) return reject(*request, order, n, line_prefix(*request) + why);
  }
  return a;
}

}  // namespace tpllama
