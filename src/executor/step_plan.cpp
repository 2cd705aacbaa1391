// StepPlan wire format: little-endian PODs and length-prefixed arrays, same binary on every rank.
#include "executor/step_plan.h"

#include <cstring>
#include <type_traits>

#include "core/byte_codec.h"
#include "core/error.h"

namespace tpllama {

std::vector<uint8_t> encode_sampled(const SampledRows& rows) {
  ByteWriter w;
  w.put(rows.group);
  w.put_vector(rows.tokens);
  w.put<uint64_t>(rows.logprobs.size());
  for (const RowLogprobs& l : rows.logprobs) {
    w.put(l.row);
    w.put(l.logprob);
    w.put(l.rank);
    w.put_vector(l.top_tokens);
    w.put_vector(l.top_logprobs);
  }
  return std::move(w.bytes);
}

SampledRows decode_sampled(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "plan message");
  SampledRows rows;
  rows.group = r.get<int64_t>();
  rows.tokens = r.get_vector<int32_t>();
  const auto n = r.get<uint64_t>();
  TPLLAMA_CHECK(n <= rows.tokens.size(), n, " logprob rows for ", rows.tokens.size(), " tokens");
  for (uint64_t i = 0; i < n; ++i) {
    RowLogprobs l;
    l.row = r.get<int32_t>();
    l.logprob = r.get<float>();
    l.rank = r.get<int32_t>();
    l.top_tokens = r.get_vector<int32_t>();
    l.top_logprobs = r.get_vector<float>();
    rows.logprobs.push_back(std::move(l));
  }
  return rows;
}

std::vector<uint8_t> encode_plan(const StepPlan& plan) {
  ByteWriter w;
  w.put(plan.group);
  w.put(plan.kind);
  w.put_vector(plan.cache_ops);
  w.put_vector(plan.batch.tokens);
  w.put_vector(plan.batch.positions);
  w.put_vector(plan.batch.slots);
  w.put_vector(plan.batch.logit_rows);
  w.put_vector(plan.sampling);
  w.put_vector(plan.edits);
  w.put(plan.masks.width);
  w.put_vector(plan.masks.rows);
  w.put_vector(plan.masks.words);
  return std::move(w.bytes);
}

StepPlan decode_plan(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "plan message");
  StepPlan plan;
  plan.group = r.get<int64_t>();
  const auto kind = r.get<uint8_t>();
  TPLLAMA_CHECK(kind <= static_cast<uint8_t>(PlanKind::kKeepAlive), "step plan of unknown kind ",
                int{kind});
  plan.kind = static_cast<PlanKind>(kind);
  plan.cache_ops = r.get_vector<CacheOp>();
  plan.batch.tokens = r.get_vector<int32_t>();
  plan.batch.positions = r.get_vector<int32_t>();
  plan.batch.slots = r.get_vector<int32_t>();
  plan.batch.logit_rows = r.get_vector<int32_t>();
  plan.sampling = r.get_vector<RowSampling>();
  plan.edits = r.get_vector<LogitEdit>();
  plan.masks.width = r.get<int32_t>();
  plan.masks.rows = r.get_vector<int32_t>();
  plan.masks.words = r.get_vector<uint32_t>();
  TPLLAMA_CHECK(
      plan.masks.width >= 0 &&
          plan.masks.words.size() == plan.masks.rows.size() * static_cast<size_t>(plan.masks.width),
      "plan has ", plan.masks.words.size(), " mask words for ", plan.masks.rows.size(), " rows of ",
      plan.masks.width);
  for (const int32_t row : plan.masks.rows)
    TPLLAMA_CHECK(row >= 0 && static_cast<size_t>(row) < plan.sampling.size(), "plan masks row ",
                  row, " of ", plan.sampling.size());
  TPLLAMA_CHECK(plan.sampling.size() == plan.batch.logit_rows.size(), "plan has ",
                plan.sampling.size(), " sampling entries for ", plan.batch.logit_rows.size(),
                " rows");
  for (const LogitEdit& e : plan.edits)
    TPLLAMA_CHECK(e.row >= 0 && static_cast<size_t>(e.row) < plan.sampling.size(),
                  "plan has a logit edit of row ", e.row, " of ", plan.sampling.size());
  TPLLAMA_CHECK(r.position() == bytes.size(), "step plan message of ", bytes.size(), " bytes has ",
                bytes.size() - r.position(), " after the plan");
  return plan;
}

}  // namespace tpllama
