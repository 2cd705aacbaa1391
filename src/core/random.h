// The program's randomness, fully specified so that a seed gives the same numbers everywhere:
// splitmix64 (Steele, Lea and Flood 2014; Vigna's splitmix64.c), a 64-bit mixer for seeds, seeded
// weights and hash chains; and Rng, a request's stream of uniforms for sampling. Not for security.
#pragma once

#include <cstdint>

namespace tpllama {

inline constexpr uint64_t kSplitmix64Gamma = 0x9E3779B97F4A7C15ULL;  // 2^64 / golden ratio, odd

// The output of a splitmix64 generator whose state is z, one step before it advances: the stream
// seeded with s yields splitmix64(s), splitmix64(s + gamma), ... (mod 2^64).
constexpr uint64_t splitmix64(uint64_t z) {
  z += kSplitmix64Gamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The next output of the stream whose state is `state` (Vigna's next()), advancing it.
constexpr uint64_t splitmix64_next(uint64_t& state) {
  const uint64_t out = splitmix64(state);
  state += kSplitmix64Gamma;
  return out;
}

// xoshiro256** seeded through splitmix64: a request's (or a sample's) stream of uniforms, unlike
// the std:: distributions the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

}  // namespace tpllama
