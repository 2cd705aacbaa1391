// VocabParallelHead: what the last stage makes of its logits. Each TP rank holds the logits of its
// slice of the vocabulary (Megatron's vocab-parallel lm_head); the head turns them into a token per
// logit row without gathering the rows where it can: greedy rows take each shard's argmax reduced
// across the TP group, sampled rows draw from whole rows gathered across it, and log-probabilities
// come from a reduced maximum and sum of exponentials (plus each shard's top candidates).
#pragma once

#include <cstdint>
#include <vector>

#include "core/sampling_params.h"
#include "core/tensor.h"
#include "model/llama_model.h"
#include "parallel/communicator.h"

namespace tpllama {

// How one logit row becomes a token.
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

// A step's tokens, one per logit row, and the log-probabilities of the rows that asked for them.
struct SampledTokens {
  std::vector<int32_t> tokens;
  std::vector<RowLogprobs> logprobs;
};

class VocabParallelHead {
 public:
  // model: this rank's last stage, whose logits (rows, vocab_local) start at its vocab_begin();
  // tp_comm: its TP group (every rank of it calls sample() with the same rows).
  VocabParallelHead(const LlamaModel& model, Communicator& tp_comm);

  // The token of each logit row — greedy where its temperature is 0, else drawn with its uniform,
  // the same on every TP rank — and the log-probabilities the rows ask for. Collective over the TP
  // group.
  SampledTokens sample(const std::vector<RowSampling>& rows, const Tensor& logits);

 private:
  // This shard's argmax of every logit row (on the model's device), into local_max_*.
  void local_argmax(const Tensor& logits);
  // The largest logit of each given row and its token id over the whole vocabulary.
  void reduce_argmax(const std::vector<size_t>& rows, std::vector<float>* values, std::vector<int32_t>* indices);
  std::vector<int32_t> draw(const std::vector<RowSampling>& rows, const Tensor& logits);
  std::vector<RowLogprobs> row_logprobs(const std::vector<RowSampling>& rows, const Tensor& logits,
                                        const std::vector<int32_t>& tokens);
  // Row r of the logits where the host can read it: in place on the CPU, a copy from a GPU.
  const float* host_row(const Tensor& logits, int64_t r);

  const LlamaModel& model_;
  Communicator& tp_comm_;
  // Device results the host reads, allocated once: one logit row (top log-probabilities, a host
  // copy on a GPU), and the argmax of each logit row.
  Buffer host_row_;
  Buffer argmax_index_;
  Buffer argmax_value_;
  // Log-probabilities: each scored row's index, maximum and chosen column in; its sums out.
  Buffer logprob_rows_;
  Buffer logprob_max_;
  Buffer logprob_chosen_;
  Buffer logprob_sums_;
  // Sampling, max_sample_rows rows at a time: row indices, whole rows, the TP group's gather.
  Buffer sample_index_;
  Buffer sample_whole_;
  Buffer sample_gathered_;
  std::vector<int32_t> local_max_index_;
  std::vector<float> local_max_value_;
};

}  // namespace tpllama
