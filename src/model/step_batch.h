// What one forward step takes and gives, as plain values: the tokens it computes, and how each
// logit row becomes a token (with its log-probabilities). The step plan carries them between ranks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/sampling_params.h"

namespace tpllama {

// The tokens one forward step computes. Tokens of one sequence appear in position order.
struct StepBatch {
  std::vector<int32_t> tokens;      // (n_tokens) token ids (first stage only)
  std::vector<int32_t> positions;   // (n_tokens) position of each token in its sequence
  std::vector<int32_t> slots;       // (n_tokens) KV cache slot of each token's sequence
  std::vector<int32_t> logit_rows;  // indices into tokens whose next-token logits are wanted

  size_t size() const { return positions.size(); }
};

// Logit rows a step may ask for: a decode row per sequence, and scored continuation tokens.
inline int max_logit_rows(int max_seqs, int max_batch_tokens) {
  return std::max(max_seqs, std::min(max_batch_tokens, 512));
}

// How one logit row becomes a token.
struct RowSampling {
  SamplingParams params;  // seed unused here: the draw is `uniform`
  double uniform = 0;     // drawn on rank 0 from the request's own stream
  int32_t logprobs = -1;  // >= 0: also return the token's logprob and this many top alternatives
  int32_t target = -1;  // >= 0 (scoring): return this token's logprob instead of the sampled one's
};

// One logit of a row changed before the row is drawn from (engine/logit_edits builds them from a
// request's LogitRules): x = (x + bias); x = x > 0 ? x / scale : x * scale; x = x - subtract. A
// bias of -inf bans the token. Each TP rank applies the edits of its own slice of the vocabulary.
struct LogitEdit {
  int32_t row = 0;  // index into the step's logit rows
  int32_t token = 0;
  float bias = 0.0f;
  float scale = 1.0f;
  float subtract = 0.0f;
};

// Rows a grammar restricts (structured outputs): bit t of a row's words (word t / 32, bit t % 32)
// allows token t, and a token past its words is not allowed. Each TP rank sets the other logits of
// its own slice of the vocabulary to -inf, after the row's LogitEdits.
struct TokenMasks {
  int32_t width = 0;            // words per row
  std::vector<int32_t> rows;    // indices into the step's logit rows
  std::vector<uint32_t> words;  // rows.size() × width
  bool empty() const { return rows.empty(); }
};

// Log-probabilities of one row: of the distribution its token is drawn from, after its LogitEdits,
// at temperature 1 and before top-k, top-p and min-p.
struct RowLogprobs {
  int32_t row = 0;
  float logprob = 0;  // of the chosen token
  std::vector<int32_t> top_tokens;
  std::vector<float> top_logprobs;
  // A row with a target that asks for logprobs (a prompt position of prompt_logprobs): 1 + the
  // tokens whose logit is above the target's. 0 otherwise.
  int32_t rank = 0;
};

// The token of a logit row holding NaN or +Inf (activations overflowed, or a weight was bad): no
// token can be chosen from it, and the request it belongs to ends with an error.
inline constexpr int32_t kNonFiniteRow = -1;

// A step's tokens, one per logit row (kNonFiniteRow where the row is not finite), and the
// log-probabilities of the rows that asked for them.
struct SampledTokens {
  std::vector<int32_t> tokens;
  std::vector<RowLogprobs> logprobs;
};

}  // namespace tpllama
