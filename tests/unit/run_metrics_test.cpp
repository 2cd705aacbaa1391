// The constant-memory run metrics: histogram percentiles against closed form, id index against
// a plain std::map.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
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

// Two replicas' halves of one spread, merged after a trip through the wire format: the whole
// spread's percentiles (closed form), the counts summed, the run as long as the longer one.
TEST(RunSummary, ReplicasSummariesAddUpAfterTheWire) {
  RunSummary a, b;
  for (int i = 1; i <= 10000; ++i) (i % 2 ? a : b).latency.ttft.add(i * 1e-4);
  a.records.requests = 3;
  b.records.requests = 4;
  b.records.errors = 1;
  a.generated_tokens = 100;
  b.generated_tokens = 23;
  a.seconds = 2.5;
  b.seconds = 4.0;
  b.stopped_by = 10;
  a.replicas = {{3, 10, 100, 7, 0, 2.5, 2.0, 0.1}};
  b.replicas = {{4, 12, 23, 9, 1, 4.0, 3.0, 0.5}};
  RunSummary total;
  add_replica_summary(total, decode_summary(encode_summary(a)));
  add_replica_summary(total, decode_summary(encode_summary(b)));
  EXPECT_EQ(total.records.requests, 7);
  EXPECT_EQ(total.records.errors, 1);
  EXPECT_EQ(total.generated_tokens, 123);
  EXPECT_EQ(total.seconds, 4.0);
  EXPECT_EQ(total.stopped_by, 10);
  EXPECT_EQ(total.latency.ttft.count(), 10000);
  EXPECT_NEAR(total.latency.ttft.percentile(50), 0.5, 0.5 * 0.01);
  EXPECT_NEAR(total.latency.ttft.percentile(99), 0.99, 0.99 * 0.01);
  ASSERT_EQ(total.replicas.size(), 2u);
  EXPECT_EQ(total.replicas[1].generated_tokens, 23);
  std::vector<uint8_t> cut = encode_summary(a);
  cut.pop_back();
  EXPECT_THROW(decode_summary(cut), Error) << "a truncated message is refused";
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
