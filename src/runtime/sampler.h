// Token sampling: a platform-independent RNG, and the CPU sampler of ops/cpu/sampling.h (greedy
// argmax, temperature / top-k / top-p / min-p) that draws with its uniforms, so a request's seed
// reproduces the same tokens everywhere.
#pragma once

#include <cstdint>

#include "core/sampling_params.h"
#include "ops/cpu/sampling.h"

namespace tpllama {

using ops::cpu::argmax;
using ops::cpu::Candidate;
using ops::cpu::candidate_set;
using ops::cpu::sample_with_uniform;

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
