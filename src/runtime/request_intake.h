// RequestIntake: how rank 0 takes requests in. It reads them from the source one at a time, checks
// ids for duplicates, skips what a resumed run's output already answers (and checks, for the first
// of those, that the record's token count is this request's: else the output is another input's),
// tokenizes, and validates against the model (ids in its vocabulary, room in its context). A
// request becomes a sequence to run, an error record, or nothing (already answered).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/prompt_reader.h"
#include "io/resume.h"
#include "runtime/run_metrics.h"
#include "runtime/sequence.h"
#include "runtime/tokenizer.h"

namespace tpllama {

struct IntakeOptions {
  bool add_bos = true;   // prepend bos_token_id to a text prompt
  int bos_token_id = 1;
  int vocab_size = 0;    // token ids must be below it
  int context = 0;       // tokens per sequence, prompt + completion
};

// What became of one request: a sequence to run, or an error record to write (number `order`
// among the records), or neither (its record is already in the output).
struct Admission {
  std::unique_ptr<Sequence> sequence;
  std::optional<Result> rejected;
  uint64_t order = 0;
};

// The tokens the model is given for request r: its token ids as given, else BOS (when add_bos) and
// the prompt's encoding. A scoring request is tokenized as evaluation harnesses do: context and
// continuation encoded together, split where the context's own encoding ends; n_context is set to
// the context's tokens (BOS included). tokenizer may be null only for token-id requests.
std::vector<int32_t> tokenize_request(const Request& r, const Tokenizer* tokenizer, bool add_bos, int bos_token_id,
                                      int* n_context);

class RequestIntake {
 public:
  // resume may be null (no --resume); the intake takes its maps.
  RequestIntake(RequestSource& source, const Tokenizer* tokenizer, const IntakeOptions& options, ResumeIndex* resume);

  // Reads the next request; nullopt at the end of the input (or once closed).
  std::optional<Admission> next();
  // No more requests are read (a stop signal).
  void close() { done_ = true; }
  bool done() const { return done_; }

  // Requests skipped as already answered (--resume).
  long long skipped() const { return skipped_; }
  // Records of the resumed output that no request of the input matched (read to its end, the input
  // asked for none of them: records of another job).
  long long unmatched_records() const;

 private:
  Admission reject(const Request& r, uint64_t order, int prompt_tokens, const std::string& message) const;
  Admission admit(Request req);
  // Whether the output already holds the record keyed `key`; skips it when so. A request skipped
  // by id (by_id) is first checked against its record (the first kCheckedResumes of them).
  bool already_written(const std::string& key, const Request* by_id = nullptr);
  void check_resumed(const Request& req, const ResumedRecord& record) const;

  static constexpr int kCheckedResumes = 1000;  // tokenizing costs

  RequestSource& source_;
  const Tokenizer* tokenizer_;
  IntakeOptions options_;
  std::unordered_map<std::string, int> remaining_done_;  // --resume: records still to skip per id
  std::unordered_map<std::string, std::vector<ResumedRecord>> resumed_records_;  // --resume: by id
  std::string resumed_path_;
  int checked_resumes_ = 0;
  IdIndex seen_;  // id → line it first appeared on
  bool done_ = false;
  long long skipped_ = 0;
  uint64_t next_order_ = 0;
};

}  // namespace tpllama
