// StepPlan: what rank 0 decides for one micro-batch group and every rank executes — KV slot
// changes, the tokens with their positions and slots, the rows to sample and how. Plans travel
// down the pipeline as byte messages, each ahead of its hidden states.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_model.h"
#include "core/sampling_params.h"

namespace tpllama {

struct CacheOp {
  static constexpr int32_t kRelease = -1;
  int32_t slot = 0;
  int32_t block = kRelease;  // >= 0: append this block to the slot's table; kRelease: empty the table
};

struct RowSampling {
  SamplingParams params;  // seed unused here: the draw is `uniform`
  double uniform = 0;     // drawn on rank 0 from the request's own stream
  int32_t logprobs = -1;  // >= 0: also return the token's logprob and this many top alternatives
  int32_t target = -1;    // >= 0 (scoring): return this token's logprob instead of the sampled one's
};

// Log-probabilities (of the model's own distribution: temperature 1, no filtering) of one row.
struct RowLogprobs {
  int32_t row = 0;
  float logprob = 0;  // of the chosen token
  std::vector<int32_t> top_tokens;
  std::vector<float> top_logprobs;
};

// What the last stage sends back to rank 0 for one group.
struct SampledRows {
  int64_t group = 0;
  std::vector<int32_t> tokens;  // one per logit row
  std::vector<RowLogprobs> logprobs;
};

struct StepPlan {
  int64_t group = 0;
  bool shutdown = false;
  std::vector<CacheOp> cache_ops;     // block table changes, applied in order before the step
  StepBatch batch;
  std::vector<RowSampling> sampling;  // one per batch.logit_rows entry
};

std::vector<uint8_t> encode_sampled(const SampledRows& rows);
SampledRows decode_sampled(const std::vector<uint8_t>& bytes);

// A plan as bytes (its hidden states travel as a tensor message of their own).
std::vector<uint8_t> encode_plan(const StepPlan& plan);
// Decodes a whole message of encode_plan; bytes left over are an error.
StepPlan decode_plan(const std::vector<uint8_t>& bytes);

}  // namespace tpllama
