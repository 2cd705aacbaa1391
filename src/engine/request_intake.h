// RequestGate: rank 0 reads each request, checks its id, skips (and spot-checks) what a resumed
// output already answers and numbers the records. RequestIntake then tokenizes and validates each
// request the gate lets through: a sequence to run or an error record. With several replicas the
// gate runs once, on rank 0, and each replica's leader runs an intake over what it is handed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "engine/id_index.h"
#include "engine/sequence.h"
#include "io/prompt_reader.h"
#include "io/resume.h"
#include "model/model_text.h"

namespace tpllama {

class StructuredOutputs;

struct IntakeOptions {
  int vocab_size = 0;  // token ids must be below it
  int context = 0;     // tokens per sequence, prompt + completion
  int max_seqs = 0;    // sequences at once, which a request's n samples must fit in (0: any n)
};

// What became of one request: a sequence to run (read at `admitted`, the start of its time to
// first token), or an error record to write (number `order` among the records), or neither (its
// record is already in the output).
struct Admission {
  std::unique_ptr<Sequence> sequence;
  std::optional<Result> rejected;
  uint64_t order = 0;
  Clock::time_point admitted;
};

// A request the gate let through, numbered among the job's records (`order`), or refused by it
// (refusal: the error record's message; a line that is no request, or an id another line took).
struct GatedRequest {
  Request request;
  uint64_t order = 0;
  std::optional<std::string> refusal;
};

// Where an intake's requests come from: the gate over the input, or (a replica's leader) what
// rank 0's gate handed to it.
class GatedSource {
 public:
  virtual ~GatedSource() = default;
  // As RequestSource::next.
  virtual std::optional<GatedRequest> next(bool wait) = 0;
  virtual bool ended() const = 0;
};

class RequestGate final : public GatedSource {
 public:
  // resume may be null (no --resume); the gate takes its maps. text and context: to spot-check
  // skipped requests against their records (text may be null when every request carries token
  // ids).
  RequestGate(RequestSource& source, const ModelText* text, int context, ResumeIndex* resume);

  // The next request not already answered; nullopt at the end of the input (ended() is then true)
  // or while a stream has no whole request yet (RequestSource::next).
  std::optional<GatedRequest> next(bool wait) override;
  bool ended() const override { return source_.ended(); }

  // Requests skipped as already answered (--resume).
  long long skipped() const { return skipped_; }
  // Records of the resumed output that no request of the input matched (read to its end, the input
  // asked for none of them: records of another job).
  long long unmatched_records() const;

 private:
  // nullopt: skipped.
  std::optional<GatedRequest> pass(Request req);
  // Whether the output already holds the record keyed `key`; skips it when so. A request skipped
  // by id (by_id) is first checked against its record (the first kCheckedResumes of them).
  bool already_written(const std::string& key, const Request* by_id = nullptr);
  void check_resumed(const Request& req, const ResumedRecord& record) const;

  static constexpr int kCheckedResumes = 1000;  // tokenizing costs

  RequestSource& source_;
  const ModelText* text_;
  int context_;
  std::unordered_map<std::string, int> remaining_done_;  // --resume: records still to skip per id
  std::unordered_map<std::string, std::vector<ResumedRecord>> resumed_records_;  // --resume: by id
  std::string resumed_path_;
  int checked_resumes_ = 0;
  IdIndex seen_;  // id → line it first appeared on
  long long skipped_ = 0;
  uint64_t next_order_ = 0;
};

class RequestIntake {
 public:
  // text may be null when every request carries token ids (benchmarks). structured: where a
  // request's constraint is compiled and its sequence given its grammar (null: a constrained
  // request is refused).
  RequestIntake(GatedSource& source, const ModelText* text, const IntakeOptions& options,
                StructuredOutputs* structured = nullptr);

  // Takes the next request; nullopt at the end of the input (done() is then true), once closed, or
  // while a stream has no whole request yet (RequestSource::next: wait looks for up to a quarter
  // second).
  std::optional<Admission> next(bool wait);
  // No more requests are read (a stop signal).
  void close() { done_ = true; }
  bool done() const { return done_; }

 private:
  Admission reject(const Request& r, uint64_t order, int prompt_tokens,
                   const std::string& message) const;
  Admission admit(GatedRequest gated);

  GatedSource& source_;
  const ModelText* text_;
  IntakeOptions options_;
  StructuredOutputs* structured_;
  bool done_ = false;
};

}  // namespace tpllama
