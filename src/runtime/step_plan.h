// StepPlan: what rank 0 decides for one micro-batch group and every rank executes — KV slot
// changes, the tokens with their positions and slots, the rows to sample and how. Plans travel
// down the pipeline together with the hidden states, as one byte message.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/llama_model.h"
#include "runtime/sampling_params.h"

namespace tpllama {

struct CacheOp {
  static constexpr int32_t kRelease = -1;
  int32_t slot = 0;
  int32_t block = kRelease;  // >= 0: append this block to the slot's table; kRelease: empty the table
};

struct RowSampling {
  SamplingParams params;  // seed unused here: the draw is `uniform`
  double uniform = 0;     // drawn on rank 0 from the request's own stream
};

struct StepPlan {
  int64_t group = 0;
  bool shutdown = false;
  std::vector<CacheOp> cache_ops;     // block table changes, applied in order before the step
  StepBatch batch;
  std::vector<RowSampling> sampling;  // one per batch.logit_rows entry
};

// Plan bytes, followed by `hidden` (n_tokens, dim) when it is not empty.
std::vector<uint8_t> encode_plan(const StepPlan& plan, const Tensor& hidden);
// Decodes a plan; *hidden_offset is where the hidden bytes start (== size when none).
StepPlan decode_plan(const std::vector<uint8_t>& bytes, size_t* hidden_offset);

}  // namespace tpllama
