// core/random.h's splitmix64 against the published outputs of Vigna's splitmix64.c, and the two
// forms of it (stateless and stream) against each other.
#include <cstdint>

#include <gtest/gtest.h>

#include "core/random.h"

namespace tpllama {
namespace {

// The first five outputs of splitmix64.c seeded with 1234567 (the values published with the
// algorithm, checked here against a separate big-integer computation of its steps).
constexpr uint64_t kSeed1234567[] = {6457827717110365317ULL, 3203168211198807973ULL,
                                     9817491932198370423ULL, 4593380528125082431ULL,
                                     16408922859458223821ULL};

TEST(Splitmix64, StreamMatchesPublishedOutputsForSeed1234567) {
  uint64_t state = 1234567;
  for (const uint64_t expected : kSeed1234567) EXPECT_EQ(splitmix64_next(state), expected);
}

TEST(Splitmix64, StatelessFormIsTheStreamAtThatState) {
  for (int k = 0; k < 5; ++k) {
    const uint64_t state = 1234567 + static_cast<uint64_t>(k) * kSplitmix64Gamma;  // mod 2^64
    EXPECT_EQ(splitmix64(state), kSeed1234567[k]) << "k " << k;
  }
}

TEST(Splitmix64, StreamAdvancesByTheGoldenGamma) {
  uint64_t state = ~uint64_t{0};
  splitmix64_next(state);
  EXPECT_EQ(state, kSplitmix64Gamma - 1);  // wraps modulo 2^64
}

}  // namespace
}  // namespace tpllama
