// Sampler tests: closed-form truncation sets, determinism, and empirical frequencies against a
// softmax computed independently here.
#include "core/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/sampling.h"

namespace tpllama {
namespace {

using ops::argmax;
using ops::Candidate;
using ops::candidate_set;
using ops::sample_with_uniform;

// One token as the engine's last stage draws it for a row: temperature 0 → argmax (rng
// untouched); otherwise u = rng.uniform() once, walked through the candidate_set's cumulative
// probabilities.
int sample(const float* logits, int n, const SamplingParams& p, Rng& rng) {
  if (p.temperature == 0.0) return argmax(logits, n);
  return sample_with_uniform(logits, n, p, rng.uniform());
}

SamplingParams params(double temperature, int top_k = 0, double top_p = 1.0, double min_p = 0.0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (const double q : probs) logits.push_back(static_cast<float>(std::log(q)));
  return logits;
}

std::vector<double> reference_softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> out;
  double sum = 0.0;
  for (const float l : logits) {
    out.push_back(std::exp(static_cast<double>(l) / temperature));
    sum += out.back();
  }
  for (auto& v : out) v /= sum;
  return out;
}

std::vector<float> random_logits(Rng& rng, int n, double scale) {
  std::vector<float> logits(static_cast<size_t>(n));
  for (auto& l : logits) l = static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale);
  return logits;
}

std::vector<int> tokens_of(const std::vector<Candidate>& c) {
  std::vector<int> out;
  for (const auto& cand : c) out.push_back(cand.token);
  return out;
}

// Straightforward reference: full sort, then each filter in turn with renormalisation.
std::vector<int> reference_candidates(const std::vector<float>& logits, const SamplingParams& p) {
  auto probs = reference_softmax(logits, p.temperature);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[a] > probs[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(p.top_k);
  double mass = 0.0;
  for (const int t : order) mass += probs[t];
  double cum = 0.0;
  size_t keep = 0;
  while (keep < order.size()) {
    cum += probs[order[keep++]] / mass;
    if (p.top_p < 1.0 && cum >= p.top_p - 1e-9) break;
  }
  order.resize(keep);
  const double threshold = p.min_p * probs[order[0]];
  std::erase_if(order, [&](int t) { return probs[t] < threshold; });
  return order;
}

TEST(Rng, UniformInUnitIntervalAndDeterministic) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  double sum = 0.0;
  for (int i = 0; i < 100000; ++i) {
    const double u = a.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    const double v = b.uniform();
    ASSERT_EQ(u, v);
    differs = differs || (c.uniform() != u);
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / 100000.0, 0.5, 0.01);
}

TEST(Argmax, TiesGoToLowestIndex) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
  EXPECT_EQ(argmax(logits.data(), 5), 1);
  const std::vector<float> flat(7, -2.5f);
  EXPECT_EQ(argmax(flat.data(), 7), 0);
  const std::vector<float> last = {-1.0f, -1.0f, 0.5f};
  EXPECT_EQ(argmax(last.data(), 3), 2);
}

TEST(Sample, TemperatureZeroIsArgmaxAndLeavesRngUntouched) {
  const std::vector<float> logits = {0.1f, 0.9f, 0.9f, -3.0f};
  Rng rng(7), untouched(7);
  EXPECT_EQ(sample(logits.data(), 4, params(0.0), rng), 1);
  EXPECT_EQ(rng.next_u64(), untouched.next_u64());
}

TEST(Sample, TopKOneEqualsGreedy) {
  Rng gen(123);
  for (int trial = 0; trial < 200; ++trial) {
    const auto logits = random_logits(gen, 1000, 5.0);
    Rng rng(static_cast<uint64_t>(trial));
    for (const double t : {0.5, 1.0, 2.0})
      ASSERT_EQ(sample(logits.data(), 1000, params(t, 1), rng), argmax(logits.data(), 1000));
  }
}

TEST(Sample, SameSeedSameTokensDifferentSeedsDiffer) {
  Rng gen(9);
  const auto logits = random_logits(gen, 512, 2.0);
  const auto p = params(1.0, 50, 0.95);
  auto draw = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(sample(logits.data(), 512, p, rng));
    return out;
  };
  EXPECT_EQ(draw(1), draw(1));
  EXPECT_NE(draw(1), draw(2));
}

TEST(CandidateSet, TopPKeepsSmallestSetReachingP) {
  const auto logits = log_of({0.05, 0.3, 0.5, 0.15});
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 4, params(1.0, 0, 0.8))),
            (std::vector<int>{2, 1}));
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 4, params(1.0, 0, 0.81))),
            (std::vector<int>{2, 1, 3}));
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 4, params(1.0, 0, 0.4))), (std::vector<int>{2}));
  const auto kept = candidate_set(logits.data(), 4, params(1.0, 0, 0.81));
  EXPECT_NEAR(kept[0].prob, 0.5 / 0.95, 1e-6);
  EXPECT_NEAR(kept[1].prob, 0.3 / 0.95, 1e-6);
  EXPECT_NEAR(kept[2].prob, 0.15 / 0.95, 1e-6);
}

TEST(CandidateSet, MinPThreshold) {
  const auto logits = log_of({0.05, 0.3, 0.5, 0.15});
  // threshold = min_p * 0.5: 0.25 keeps {0.5, 0.3}; 0.2 → 0.1 keeps {0.5, 0.3, 0.15}.
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 4, params(1.0, 0, 1.0, 0.5))),
            (std::vector<int>{2, 1}));
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 4, params(1.0, 0, 1.0, 0.2))),
            (std::vector<int>{2, 1, 3}));
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 4, params(1.0, 0, 1.0, 0.05))),
            (std::vector<int>{2, 1, 3, 0}));
  const auto kept = candidate_set(logits.data(), 4, params(1.0, 0, 1.0, 0.5));
  EXPECT_NEAR(kept[0].prob, 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(kept[1].prob, 0.3 / 0.8, 1e-6);
}

TEST(CandidateSet, TopKTiesPreferLowerIds) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 0.0f, 2.0f};
  EXPECT_EQ(tokens_of(candidate_set(logits.data(), 5, params(1.0, 2))), (std::vector<int>{1, 2}));
  const auto all = candidate_set(logits.data(), 5, params(1.0));
  EXPECT_EQ(tokens_of(all), (std::vector<int>{1, 2, 4, 0, 3}));
}

TEST(CandidateSet, TemperatureScalesLikeSoftmax) {
  const std::vector<float> logits = {1.5f, -0.5f, 0.25f, 3.0f, 0.0f};
  for (const double t : {0.3, 1.0, 2.5}) {
    const auto expected = reference_softmax(logits, t);
    const auto c = candidate_set(logits.data(), 5, params(t));
    ASSERT_EQ(c.size(), 5u);
    double sum = 0.0;
    for (const auto& cand : c) {
      EXPECT_NEAR(cand.prob, expected[cand.token], 1e-12) << "T=" << t;
      sum += cand.prob;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    for (size_t i = 1; i < c.size(); ++i) EXPECT_GE(c[i - 1].prob, c[i].prob);
  }
}

TEST(CandidateSet, MatchesBruteForceOnLargeVocab) {
  Rng gen(2024);
  const int n = 128256;
  for (int trial = 0; trial < 6; ++trial) {
    const auto logits = random_logits(gen, n, 8.0);
    for (const auto& p :
         {params(0.8, 40, 0.9), params(1.0, 0, 0.95), params(1.3, 0, 0.5, 0.01),
          params(0.7, 0, 1.0, 0.05), params(1.0, 1000, 1.0, 0.001), params(1.0, 0, 0.999)}) {
      const auto c = candidate_set(logits.data(), n, p);
      ASSERT_EQ(tokens_of(c), reference_candidates(logits, p))
          << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p << " min_p=" << p.min_p;
      double sum = 0.0;
      for (const auto& cand : c) sum += cand.prob;
      EXPECT_NEAR(sum, 1.0, 1e-9);
    }
  }
}

// Untruncated sampling takes a selection shortcut; it must pick what walking the sorted candidate
// set would (up to last-ulp rounding, which these draws do not hit).
TEST(Sample, UntruncatedMatchesWalkOverCandidateSet) {
  Rng gen(77);
  const int n = 128256;
  for (const double scale : {2.0, 8.0, 20.0}) {
    const auto logits = random_logits(gen, n, scale);
    const auto p = params(0.9);
    const auto c = candidate_set(logits.data(), n, p);
    Rng rng(11), twin(11);
    for (int i = 0; i < 100; ++i) {
      const double u = twin.uniform();
      double cum = 0.0;
      int expected = c.back().token;
      for (const auto& cand : c) {
        cum += cand.prob;
        if (u < cum) {
          expected = cand.token;
          break;
        }
      }
      ASSERT_EQ(sample(logits.data(), n, p, rng), expected) << "scale " << scale << " draw " << i;
    }
  }
}

TEST(Sample, EmpiricalFrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -3.0f};
  const double t = 0.8;
  const auto expected = reference_softmax(logits, t);
  const int draws = 20000;
  std::vector<int> counts(logits.size(), 0);
  Rng rng(31337);
  for (int i = 0; i < draws; ++i) ++counts[sample(logits.data(), 6, params(t), rng)];
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(static_cast<double>(counts[i]) / draws, expected[i], 0.015) << "token " << i;
}

TEST(Sample, TruncatedTokensAreNeverDrawn) {
  const auto logits = log_of({0.05, 0.3, 0.5, 0.15});
  Rng rng(5);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 5000; ++i) ++counts[sample(logits.data(), 4, params(1.0, 0, 0.8), rng)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[3], 0);
  EXPECT_NEAR(counts[2] / 5000.0, 0.5 / 0.8, 0.03);
}

TEST(CandidateSet, RejectsNonPositiveTemperature) {
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(candidate_set(logits.data(), 2, params(0.0)), Error);
  EXPECT_THROW(candidate_set(logits.data(), 2, params(-1.0)), Error);
}

// A NaN logit (a broken model) stops the run naming the token, with or without truncation, as the
// GPU sampler refuses such a row; a NaN is never skipped into a silently wrong draw.
TEST(Sample, NanLogitIsRefusedNamingTheToken) {
  const std::vector<float> logits = {0.5f, std::nanf(""), 1.0f};
  for (const auto& p : {params(1.0), params(1.0, 2), params(0.8, 0, 0.9)}) {
    Rng rng(1);
    try {
      sample(logits.data(), 3, p, rng);
      ADD_FAILURE() << "a NaN logit was sampled over";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("NaN (token 1)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tpllama
