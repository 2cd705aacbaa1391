// Token sampling: a platform-independent RNG, and the host sampler of ops/sampling.h (greedy
// argmax, temperature / top-k / top-p / min-p) that draws with its uniforms, so a request's seed
// reproduces the same tokens everywhere.
#pragma once

#include <cstdint>

#include "core/sampling_params.h"
#include "ops/sampling.h"

namespace tpllama {

using ops::argmax;
using ops::Candidate;
using ops::candidate_set;
using ops::sample_with_uniform;

// xoshiro256** seeded through splitmix64: fully specified, unlike the std:: distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

}  // namespace tpllama
