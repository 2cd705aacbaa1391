// Per-request sampling settings, resolved from the command line defaults and the request's own
// fields. temperature 0 means greedy.
#pragma once

#include <cstdint>

namespace tpllama {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax, ties to the lowest token id)
  int top_k = 0;             // 0 or negative: off
  double top_p = 1.0;        // 1: off; keeps the smallest most-probable set reaching top_p
  double min_p = 0.0;        // 0: off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;         // the request's own random stream
};

}  // namespace tpllama
