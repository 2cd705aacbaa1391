// The progress line off a terminal (a Slurm log, or stderr piped by mpirun): the first line comes
// after the short first wait, not after the whole --log-interval, and the next one only after the
// interval. The waits here are made short so the case takes a fraction of a second.
#include "engine/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace tpllama {
namespace {

std::string printed_by(Progress& p, const ProgressCounts& c) {
  testing::internal::CaptureStderr();
  p.update(c);
  return testing::internal::GetCapturedStderr();
}

TEST(Progress, TheFirstLineComesSoonThenOneEveryInterval) {
  Progress p(10, /*terminal=*/false, /*interval_seconds=*/30, /*first_line_seconds=*/0.05);
  ProgressCounts c;
  c.done = 1;
  EXPECT_EQ(printed_by(p, c), "") << "before the first wait";
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  const std::string first = printed_by(p, c);
  EXPECT_NE(first.find("progress: 1/10"), std::string::npos) << first;
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_EQ(printed_by(p, c), "") << "the second line waits for the 30 s interval";
}

TEST(Progress, AnIntervalShorterThanTheFirstWaitIsKept) {
  Progress p(0, false, /*interval_seconds=*/0.01, /*first_line_seconds=*/60);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_NE(printed_by(p, ProgressCounts{}).find("progress: 0 requests"), std::string::npos);
}

// A run that only scores (perplexity's windows) says what it counts, and the rate of the tokens it
// scores; one that generates too gives both rates.
TEST(Progress, ScoringShowsItsUnitAndTheRateOfScoredTokens) {
  Progress p(10, false, /*interval_seconds=*/0.01, /*first_line_seconds=*/0.01, "windows");
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ProgressCounts c;
  c.done = 2;
  c.scored_tokens = 500;
  const std::string line = printed_by(p, c);
  EXPECT_NE(line.find("progress: 2/10 (20.0%) windows, 0 errors, 0 running, "), std::string::npos)
      << line;
  const size_t end = line.find(" scored tok/s");
  ASSERT_NE(end, std::string::npos) << line;
  const size_t begin = line.rfind(' ', end - 1) + 1;
  EXPECT_GT(std::stod(line.substr(begin, end - begin)), 0.0) << line;
  EXPECT_EQ(line.find(" 0.0 tok/s"), std::string::npos)
      << "no generation rate of a run that generates nothing";

  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  c.generated_tokens = 40;
  const std::string mixed = printed_by(p, c);
  const size_t scored = mixed.find(" scored tok/s");
  ASSERT_NE(scored, std::string::npos) << mixed;
  EXPECT_LT(mixed.find(" tok/s, "), scored) << "the generation rate comes first: " << mixed;
}

}  // namespace
}  // namespace tpllama
