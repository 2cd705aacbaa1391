// Reading, checking and tokenizing requests on rank 0.
#include "runtime/request_intake.h"

#include <utility>

#include "core/error.h"

namespace tpllama {
namespace {

std::string line_prefix(const Request& r) { return "line " + std::to_string(r.line) + ": "; }

std::vector<int> encode(const Tokenizer* tokenizer, const std::string& text) {
  TPLLAMA_CHECK(tokenizer != nullptr, "a text request reached an engine without a tokenizer");
  return tokenizer->encode(text);
}

// The tokens the model is given for request r: its token ids as given, else BOS (when add_bos) and
// the prompt's encoding. A scoring request is tokenized as evaluation harnesses do: context and
// continuation encoded together, split where the context's own encoding ends; n_context is set to
// the context's tokens (BOS included). tokenizer may be null only for token-id requests.
std::vector<int32_t> tokenize_request(const Request& r, const Tokenizer* tokenizer, bool add_bos, int bos_token_id,
                                      int* n_context) {
  std::vector<int32_t> tokens;
  if (!r.token_ids.empty()) {
    tokens.assign(r.token_ids.begin(), r.token_ids.end());
    if (r.scoring) *n_context = r.n_context_tokens;
    return tokens;
  }
  if (add_bos) tokens.push_back(bos_token_id);
  const size_t bos = tokens.size();
  for (int id : encode(tokenizer, r.scoring ? r.context + r.continuation : r.prompt)) tokens.push_back(id);
  if (r.scoring) *n_context = static_cast<int>(bos + (r.context.empty() ? 0 : encode(tokenizer, r.context).size()));
  return tokens;
}

}  // namespace

RequestIntake::RequestIntake(RequestSource& source, const Tokenizer* tokenizer, const IntakeOptions& options,
                             ResumeIndex* resume)
    : source_(source), tokenizer_(tokenizer), options_(options) {
  if (resume != nullptr) {
    remaining_done_ = std::move(resume->done);
    resumed_records_ = std::move(resume->by_id);
    resumed_path_ = resume->path;
  }
}

std::optional<Admission> RequestIntake::next() {
  if (done_) return std::nullopt;
  std::optional<Request> req = source_.next();
  if (!req) {
    done_ = true;
    return std::nullopt;
  }
  return admit(std::move(*req));
}

long long RequestIntake::unmatched_records() const {
  long long n = 0;
  for (const auto& entry : remaining_done_) n += entry.second;
  return n;
}

Admission RequestIntake::reject(const Request& r, uint64_t order, int prompt_tokens, const std::string& message) const {
  Admission a;
  a.order = order;
  Result& res = a.rejected.emplace();
  res.id = r.id;
  res.prompt_tokens = prompt_tokens;
  res.finish_reason = "error";
  res.error = message;
  res.line = r.line;
  return a;
}

// Resumed runs skip what the output already holds: results by id (the first k occurrences of an id
// written k times), error records by input line.
bool RequestIntake::already_written(const std::string& key, const Request* by_id) {
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

// A request this run would skip as answered gives the token count its record gives, or the output
// is another input's (or was made with another tokenizer): taking its records for this input's
// would leave requests unanswered without a word, so the run stops (before any work when, as after
// a kill, the answered requests lead the input).
void RequestIntake::check_resumed(const Request& req, const ResumedRecord& record) const {
  int n_context = 0;
  const std::vector<int32_t> tokens =
      tokenize_request(req, tokenizer_, options_.add_bos, options_.bos_token_id, &n_context);
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

Admission RequestIntake::admit(Request req) {
  const Clock::time_point admitted = Clock::now();  // time to first token counts from here
  if (!req.error.empty()) {  // its id may be made up from the line number: keep it out of seen_
    if (already_written(error_line_key(req.line))) return {};
    return reject(req, next_order_++, 0, req.error);
  }
  const std::string key = id_key(req.id);
  const uint32_t first_line = seen_.insert(key, static_cast<uint32_t>(req.line));
  if (first_line != 0) {
    if (already_written(error_line_key(req.line))) return {};
    return reject(req, next_order_++, 0, line_prefix(req) + "duplicate id " + key + " (first on line " +
                                             std::to_string(first_line) + "); ids must be unique");
  }
  // A valid line's record is keyed by its id, or by its line when it became an error later on (a
  // prompt longer than the context).
  if (already_written(error_line_key(req.line)) || already_written(key, &req)) return {};
  const uint64_t order = next_order_++;
  int n_context = 0;
  std::vector<int32_t> tokens = tokenize_request(req, tokenizer_, options_.add_bos, options_.bos_token_id, &n_context);
  const int n = static_cast<int>(tokens.size());
  const std::vector<int>& ids = req.token_ids;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= options_.vocab_size)
      return reject(req, order, 0,
                    line_prefix(req) + "token id " + std::to_string(ids[i]) + " (element " + std::to_string(i) +
                        " of the prompt) is outside the model's vocabulary of " + std::to_string(options_.vocab_size) +
                        " tokens");
  if (req.scoring && (n_context < 1 || n_context >= n))
    return reject(req, order, n,
                  line_prefix(req) + (n_context < 1 ? "the context is empty and the model adds no BOS token"
                                                    : "the continuation adds no token after the context"));
  if (n == 0)
    return reject(req, order, 0,
                  line_prefix(req) + "the prompt is empty and the model adds no BOS token: nothing to condition on");
  if (req.scoring && n > options_.context)
    return reject(req, order, n,
                  line_prefix(req) + "context and continuation have " + std::to_string(n) + " tokens (with BOS) but the context is " +
                      std::to_string(options_.context) + " tokens: the continuation cannot be scored whole");
  if (!req.scoring && n >= options_.context)
    return reject(req, order, n,
                  line_prefix(req) + "prompt has " + std::to_string(n) + " tokens (with BOS) but the context is " +
                      std::to_string(options_.context) + " tokens, leaving no room to generate");
  Admission a;
  a.order = order;
  a.sequence = std::make_unique<Sequence>(std::move(req), tokenizer_, std::move(tokens), n_context, order);
  a.sequence->admitted = admitted;
  return a;
}

}  // namespace tpllama
