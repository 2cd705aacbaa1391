// plan_windows, perplexity's strided windows over a corpus, against windows worked out by hand from
// the Hugging Face strided-perplexity recipe (each window scores the tokens after the previous
// window's end), and the recipe's invariant: every corpus token is scored exactly once.
#include <vector>

#include <gtest/gtest.h>

#include "io/window_file.h"

namespace tpllama {
namespace {

struct Expected {
  int begin, end, scored;
};

void expect_windows(int n_tokens, int window, int stride, const std::vector<Expected>& expected) {
  const std::vector<Window> got = plan_windows(n_tokens, window, stride);
  ASSERT_EQ(got.size(), expected.size())
      << n_tokens << " tokens, window " << window << ", stride " << stride;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].begin, expected[i].begin) << "window " << i;
    EXPECT_EQ(got[i].end, expected[i].end) << "window " << i;
    EXPECT_EQ(got[i].scored, expected[i].scored) << "window " << i;
  }
}

TEST(PlanWindows, OverlappingWindowsScoreOnlyWhatTheyAddPastThePreviousEnd) {
  // 10 tokens, windows of 4 every 2: [0,4) scores 4, then each later window its last 2.
  expect_windows(10, 4, 2, {{0, 4, 4}, {2, 6, 2}, {4, 8, 2}, {6, 10, 2}});
}

TEST(PlanWindows, TheLastWindowIsCutAtTheCorpusEnd) {
  // 5 tokens, windows of 4 every 3: [3,7) is cut to [3,5) and scores token 4 only.
  expect_windows(5, 4, 3, {{0, 4, 4}, {3, 5, 1}});
  // Windows that do not overlap: the last one holds the 2 tokens left.
  expect_windows(10, 4, 4, {{0, 4, 4}, {4, 8, 4}, {8, 10, 2}});
}

TEST(PlanWindows, ACorpusThatFitsOneWindowIsOneWindow) {
  expect_windows(3, 8, 4, {{0, 3, 3}});
  expect_windows(8, 8, 4, {{0, 8, 8}});
}

TEST(PlanWindows, AnEmptyCorpusHasNoWindows) {
  expect_windows(0, 8, 4, {});
}

TEST(PlanWindows, EveryTokenIsScoredOnceAndTheLastWindowEndsTheCorpus) {
  for (int n = 1; n <= 40; ++n) {
    for (int window = 2; window <= 9; ++window) {
      for (int stride = 1; stride <= window; ++stride) {
        const std::vector<Window> w = plan_windows(n, window, stride);
        ASSERT_FALSE(w.empty());
        long long scored = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          scored += w[i].scored;
          EXPECT_EQ(w[i].begin, static_cast<int>(i) * stride);
          EXPECT_LE(w[i].end - w[i].begin, window);
          EXPECT_GE(w[i].scored, 1);
          // The scored tokens are the window's last ones, right after the previous window's end.
          if (i > 0) {
            EXPECT_EQ(w[i].end - w[i].scored, w[i - 1].end);
          }
        }
        EXPECT_EQ(scored, n) << n << " tokens, window " << window << ", stride " << stride;
        EXPECT_EQ(w.back().end, n);
      }
    }
  }
}

}  // namespace
}  // namespace tpllama
