// ResultPublisher without an engine: records reach the sink at once or, --ordered, in request
// order; each is counted by how it ended only when it reaches the output; the reorder buffer's
// room; and each step's tokens counted under prefill or decode.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/result_publisher.h"

namespace tpllama {
namespace {

class RecordingSink : public ResultSink {
 public:
  void write(const Result& r) override { ids.push_back(r.id.get<int>()); }
  void sync() override { ++syncs; }
  std::vector<int> ids;
  int syncs = 0;
};

Result record(int id, const std::string& finish_reason, bool scored = false) {
  Result r;
  r.id = id;
  r.finish_reason = finish_reason;
  if (finish_reason == "error") r.error = "bad request";
  if (scored) r.score = ScoreResult{};
  return r;
}

TEST(ResultPublisher, UnorderedRecordsAreWrittenAsTheyCome) {
  RecordingSink sink;
  ResultPublisher publisher(sink, /*ordered=*/false, /*reorder_limit=*/1);
  publisher.publish(2, record(2, "stop"));
  publisher.publish(0, record(0, "length"));
  EXPECT_EQ(sink.ids, (std::vector<int>{2, 0}));
  EXPECT_TRUE(publisher.has_room());
  EXPECT_EQ(publisher.published(), 2);
}

TEST(ResultPublisher, EachRecordIsCountedByHowItEnded) {
  RecordingSink sink;
  ResultPublisher publisher(sink, false, 1);
  publisher.publish(0, record(0, "stop"));
  publisher.publish(1, record(1, "length"));
  publisher.publish(2, record(2, "stop"));
  publisher.publish(3, record(3, "error"));
  publisher.publish(4, record(4, "length", /*scored=*/true));
  const RunSummary& s = publisher.summary();
  EXPECT_EQ(s.records.requests, 5);
  EXPECT_EQ(s.records.finished_stop, 2);
  EXPECT_EQ(s.records.finished_length, 1);
  EXPECT_EQ(s.records.errors, 1);
  EXPECT_EQ(s.records.scored, 1);
}

TEST(ResultPublisher, OrderedRecordsWaitForEveryEarlierOne) {
  RecordingSink sink;
  ResultPublisher publisher(sink, /*ordered=*/true, /*reorder_limit=*/2);
  publisher.publish(2, record(2, "stop"));
  publisher.publish(1, record(1, "stop"));
  EXPECT_TRUE(sink.ids.empty());
  EXPECT_EQ(publisher.summary().records.requests, 0);  // counted when written, not when finished
  EXPECT_FALSE(publisher.has_room());                  // two held back, the limit
  publisher.publish(0, record(0, "length"));
  EXPECT_EQ(sink.ids, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(publisher.summary().records.requests, 3);
  EXPECT_EQ(publisher.summary().records.finished_stop, 2);
  EXPECT_TRUE(publisher.has_room());
  EXPECT_EQ(publisher.published(), 3);
}

TEST(ResultPublisher, FinishSyncsAndCountsWhatOrderedOutputHeldBack) {
  RecordingSink sink;
  ResultPublisher publisher(sink, true, 8);
  publisher.publish(0, record(0, "stop"));
  publisher.publish(2, record(2, "stop"));
  publisher.publish(3, record(3, "stop"));  // request 1 never finished (a stop)
  publisher.finish();
  EXPECT_EQ(sink.ids, (std::vector<int>{0}));
  EXPECT_EQ(sink.syncs, 1);
  EXPECT_EQ(publisher.summary().unwritten, 2);
  EXPECT_EQ(publisher.summary().records.requests, 1);
  EXPECT_EQ(publisher.published(), 3);
  EXPECT_GE(publisher.summary().seconds, 0.0);
}

TEST(ResultPublisher, AStepWithPromptTokensIsPrefillAnyOtherIsDecode) {
  RecordingSink sink;
  ResultPublisher publisher(sink, false, 1);
  publisher.start_step_clock();
  Group prefill;
  prefill.prefill_tokens = 48;
  prefill.decode_tokens = 3;  // decodes riding along in a prefill step count as prefill time
  publisher.step_done(prefill);
  Group decode;
  decode.decode_tokens = 5;
  decode.decode_context = 640;
  publisher.step_done(decode);
  publisher.step_done(decode);
  const RunSummary& s = publisher.summary();
  EXPECT_EQ(s.phases.prefill_step_tokens, 48);
  EXPECT_EQ(s.phases.decode_steps, 2);
  EXPECT_EQ(s.phases.decode_step_tokens, 10);
  EXPECT_EQ(s.phases.decode_context_tokens, 1280);
  EXPECT_GE(s.phases.prefill_seconds, 0.0);
  EXPECT_GE(s.phases.decode_seconds, 0.0);
}

}  // namespace
}  // namespace tpllama
