// VocabParallelHead: the last stage's logits, one vocabulary shard per TP rank, made tokens and
// log-probabilities: argmax reduced across the group, sampled rows gathered whole, log-softmax from
// reduced maxima and sums.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/llama_model.h"
#include "model/step_batch.h"
#include "parallel/communicator.h"

namespace tpllama {

class VocabParallelHead {
 public:
  // model: this rank's last stage, whose logits (rows, vocab_local) start at its vocab_begin();
  // tp_comm: its TP group (every rank of it calls sample() with the same rows).
  VocabParallelHead(const LlamaModel& model, Communicator& tp_comm);

  // The token of each logit row — greedy where its temperature is 0, else drawn with its uniform,
  // the same on every TP rank; kNonFiniteRow where the row holds a NaN or +inf on any shard — and
  // the log-probabilities the rows ask for, all after the edits and then the grammar masks (each
  // rank applies those of its own slice of the vocabulary, in place). Collective over the TP group.
  SampledTokens sample(const std::vector<RowSampling>& rows, const std::vector<LogitEdit>& edits,
                       const TokenMasks& masks, const Tensor& logits);

  // Edits sent to the device at once (a step with more goes in several launches).
  static constexpr int64_t kEditChunk = 16384;

 private:
  // The edits of this rank's slice of the vocabulary, applied to its logits in place.
  void apply_edits(const std::vector<LogitEdit>& edits, const Tensor& logits);
  // The grammar masks, on this rank's slice: its disallowed tokens' logits become -inf.
  void apply_masks(const TokenMasks& masks, const Tensor& logits);
  // This shard's argmax of every logit row (on the model's device), into local_max_*.
  void local_argmax(const Tensor& logits);
  // The largest logit of each given row and its token id over the whole vocabulary.
  void reduce_argmax(const std::vector<size_t>& rows, std::vector<float>* values,
                     std::vector<int32_t>* indices);
  std::vector<int32_t> draw(const std::vector<RowSampling>& rows, const Tensor& logits);
  std::vector<RowLogprobs> row_logprobs(const std::vector<RowSampling>& rows, const Tensor& logits,
                                        const std::vector<int32_t>& tokens);
  std::vector<float> local_sums(const std::vector<RowSampling>& sampling,
                                const std::vector<size_t>& rows,
                                const std::vector<float>& max_value, const Tensor& logits,
                                const std::vector<int32_t>& tokens);
  void local_top(const std::vector<RowSampling>& sampling, const std::vector<size_t>& rows,
                 const std::vector<int32_t>& max_index, int top_n, const Tensor& logits,
                 std::vector<float>* values, std::vector<int32_t>* ids);
  // A row whose target's rank is asked for: a prompt position of prompt_logprobs (a target and
  // logprobs); a scoring request's rows ask for no logprobs.
  static bool ranked(const RowSampling& r) { return r.target >= 0 && r.logprobs >= 0; }
  std::vector<float> logits_above_target(const std::vector<RowSampling>& sampling,
                                         const std::vector<size_t>& rows,
                                         const std::vector<float>& sums, const Tensor& logits);
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
  // Logit edits, kEditChunk at a time: (row, column) cells and (bias, scale, subtract).
  Buffer edit_cells_;
  Buffer edit_params_;
  // Grammar masks in: each masked row's index and bit words (a row of the whole vocabulary).
  int64_t mask_width_ = 0;
  Buffer mask_rows_;
  Buffer mask_words_;
  std::vector<int32_t> local_max_index_;
  std::vector<float> local_max_value_;
};

}  // namespace tpllama
