// The constant-memory run metrics: histogram percentiles against closed form, id index against
// a plain std::map.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "engine/id_index.h"
#include "engine/run_metrics.h"

namespace tpllama {
namespace {

TEST(LatencyHistogram, PercentilesOfAUniformSpreadAreWithinOnePercent) {
  LatencyHistogram h;
  for (int i = 1; i <= 10000; ++i) h.add(i * 1e-4);  // 0.1 ms .. 1 s
  EXPECT_EQ(h.count(), 10000);
  EXPECT_NEAR(h.mean(), 0.50005, 1e-9);
  EXPECT_NEAR(h.percentile(50), 0.5, 0.5 * 0.01);
  EXPECT_NEAR(h.percentile(90), 0.9, 0.9 * 0.01);
  EXPECT_NEAR(h.percentile(99), 0.99, 0.99 * 0.01);
  EXPECT_LE(h.percentile(100), 1.0);
}

TEST(LatencyHistogram, EmptyAndZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.percentile(50), 0.0);
  h.add(0.0);
  EXPECT_LE(h.percentile(50), 1e-6);
}

TEST(IdIndex, ReportsTheFirstLineOfEveryRepeat) {
  IdIndex index;
  std::map<std::string, uint32_t> reference;
  for (uint32_t line = 1; line <= 50000; ++line) {
    const std::string key = "\"id-" + std::to_string(line % 37000) + "\"";
    auto [it, fresh] = reference.emplace(key, line);
    const uint32_t got = index.insert(key, line);
    ASSERT_EQ(got, fresh ? 0u : it->second) << key << " on line " << line;
  }
}

}  // namespace
}  // namespace tpllama
