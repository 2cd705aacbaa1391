// ResultWriter and result_to_json_line: record shape, error-only and logprobs keys, UTF-8 repair,
// file handling (truncate or append), and OrderedResultWriter's reordering.
#include "io/result_writer.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace tpllama {
namespace {

using nlohmann::json;

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / name).string();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::set<std::string> keys_of(const json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

Result make_result(json id, std::string text, std::string finish, std::string error = "") {
  Result r;
  r.id = std::move(id);
  r.text = std::move(text);
  r.prompt_tokens = 5;
  r.completion_tokens = 3;
  r.finish_reason = std::move(finish);
  r.error = std::move(error);
  return r;
}

TEST(ResultToJsonLine, ExactRecordInDocumentedKeyOrder) {
  Result r = make_result("abc", "Hi \"there\"\n", "stop");
  EXPECT_EQ(result_to_json_line(r),
            "{\"id\":\"abc\",\"text\":\"Hi \\\"there\\\"\\n\",\"prompt_tokens\":5,"
            "\"completion_tokens\":3,\"finish_reason\":\"stop\"}\n");
}

TEST(ResultToJsonLine, ErrorKeyOnlyWhenFinishReasonIsError) {
  json ok = json::parse(result_to_json_line(make_result(7, "t", "length", "ignored")));
  EXPECT_EQ(keys_of(ok), (std::set<std::string>{"id", "text", "prompt_tokens", "completion_tokens",
                                                "finish_reason"}));
  json bad = json::parse(result_to_json_line(make_result(8, "", "error", "line 8: bad")));
  EXPECT_EQ(keys_of(bad), (std::set<std::string>{"id", "text", "prompt_tokens", "completion_tokens",
                                                 "finish_reason", "error"}));
  EXPECT_EQ(bad["error"], "line 8: bad");
  EXPECT_EQ(bad["finish_reason"], "error");
}

TEST(ResultToJsonLine, InvalidUtf8IsReplacedNotThrown) {
  Result r = make_result(1, "ok\xFF\xC3", "length");
  std::string line;
  EXPECT_NO_THROW(line = result_to_json_line(r));
  json j = json::parse(line);  // the output itself must be valid UTF-8 JSON
  std::string text = j["text"];
  EXPECT_EQ(text.substr(0, 2), "ok");
  EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos);  // U+REPLACEMENT CHARACTER
  EXPECT_EQ(text.find('\xFF'), std::string::npos);
}

TEST(ResultToJsonLine, NonAsciiTextIsKeptAsUtf8) {
  Result r = make_result(1, "caf\xC3\xA9 \xE6\x97\xA5", "stop");
  json j = json::parse(result_to_json_line(r));
  EXPECT_EQ(j["text"], "caf\xC3\xA9 \xE6\x97\xA5");
}

TEST(ResultToJsonLine, IsExactlyOneLine) {
  std::string line = result_to_json_line(make_result("x", "a\nb\r\nc", "stop"));
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(ResultWriter, WritesOneParseableObjectPerRecord) {
  std::string path = temp_path("result_writer_records.jsonl");
  {
    ResultWriter w(path);
    EXPECT_EQ(w.records_written(), 0u);
    w.write(make_result("first", "hello", "stop"));
    EXPECT_EQ(w.records_written(), 1u);
    w.write(make_result(2, "world", "length"));
    w.write(make_result(3, "", "error", "line 3: missing required field 'prompt'"));
    EXPECT_EQ(w.records_written(), 3u);
    w.sync();
  }
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  json a = json::parse(lines[0]);
  EXPECT_EQ(a["id"], "first");
  EXPECT_EQ(a["text"], "hello");
  EXPECT_EQ(a["prompt_tokens"], 5);
  EXPECT_EQ(a["completion_tokens"], 3);
  EXPECT_EQ(a["finish_reason"], "stop");
  EXPECT_FALSE(a.contains("error"));
  json b = json::parse(lines[1]);
  EXPECT_EQ(b["id"], 2);
  EXPECT_TRUE(b["id"].is_number_integer());
  EXPECT_EQ(b["finish_reason"], "length");
  json c = json::parse(lines[2]);
  EXPECT_EQ(c["error"], "line 3: missing required field 'prompt'");
  EXPECT_EQ(read_file(path).back(), '\n');
  std::filesystem::remove(path);
}

TEST(ResultWriter, TruncatesAnExistingFile) {
  std::string path = temp_path("result_writer_truncate.jsonl");
  std::ofstream(path) << "old content that is longer than the new record\nsecond old line\n";
  {
    ResultWriter w(path);
    w.write(make_result(1, "new", "stop"));
  }
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["text"], "new");
  std::filesystem::remove(path);
}

TEST(ResultWriter, MissingDirectoryThrowsErrorNamingPath) {
  std::string path = temp_path("result_writer_no_such_dir/sub/out.jsonl");
  try {
    ResultWriter w(path);
    FAIL() << "expected tpllama::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(temp_path("result_writer_no_such_dir")));
}

TEST(ResultWriter, MovedWriterKeepsWritingToTheSameFile) {
  std::string path = temp_path("result_writer_move.jsonl");
  {
    ResultWriter a(path);
    a.write(make_result(1, "one", "stop"));
    ResultWriter b(std::move(a));
    b.write(make_result(2, "two", "stop"));
    EXPECT_EQ(b.records_written(), 2u);
  }
  EXPECT_EQ(read_lines(path).size(), 2u);
  std::filesystem::remove(path);
}

TEST(ResultWriter, SyncOnCharacterDeviceIsNotAnError) {
  ResultWriter w("/dev/null");
  w.write(make_result(1, "x", "stop"));
  EXPECT_NO_THROW(w.sync());
  EXPECT_EQ(w.records_written(), 1u);
}

TEST(ResultToJsonLine, LogprobsKeyOnlyWhenSetInTheLegacyLayout) {
  Result r = make_result("q", "ab", "length");
  EXPECT_EQ(result_to_json_line(r).find("logprobs"), std::string::npos);
  r.logprobs = std::vector<TokenLogprob>{{"a", -0.25, {{"a", -0.25}, {"b", -2.0}, {"a", -3.0}}},
                                         {"b", -1.5, {}}};
  EXPECT_EQ(result_to_json_line(r),
            "{\"id\":\"q\",\"text\":\"ab\",\"prompt_tokens\":5,\"completion_tokens\":3,"
            "\"finish_reason\":\"length\",\"logprobs\":{\"tokens\":[\"a\",\"b\"],"
            "\"token_logprobs\":[-0.25,-1.5],\"top_logprobs\":[{\"a\":-0.25,\"b\":-2.0},{}],"
            "\"text_offset\":[0,1]}}\n");
  r.logprobs = std::vector<TokenLogprob>{};  // requested, nothing generated
  EXPECT_EQ(json::parse(result_to_json_line(r))["logprobs"],
            json::parse(
                R"({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []})"));
}

TEST(ResultWriter, AppendKeepsEarlierContent) {
  std::string path = temp_path("result_writer_append.jsonl");
  const std::string earlier = "{\"id\":\"old\",\"finish_reason\":\"stop\"}\n";
  std::ofstream(path, std::ios::binary) << earlier;
  {
    ResultWriter w(path, OutputFormat::kJsonl, /*append=*/true);
    w.write(make_result(2, "new", "stop"));
    EXPECT_EQ(w.records_written(), 1u);
  }
  EXPECT_EQ(read_file(path), earlier + result_to_json_line(make_result(2, "new", "stop")));
  std::filesystem::remove(path);
}

TEST(OrderedResultWriter, OutOfOrderSubmitsAreWrittenInOrder) {
  std::string path = temp_path("result_writer_ordered.jsonl");
  {
    ResultWriter w(path);
    OrderedResultWriter ordered(w);
    auto submit = [&](uint64_t order) { ordered.submit(order, make_result(order, "t", "stop")); };
    submit(2);
    submit(1);
    EXPECT_EQ(ordered.buffered(), 2u);
    EXPECT_EQ(ordered.next_order(), 0u);
    EXPECT_EQ(w.records_written(), 0u);
    submit(4);
    submit(0);  // releases 0, 1, 2; 4 still waits for 3
    EXPECT_EQ(ordered.buffered(), 1u);
    EXPECT_EQ(ordered.next_order(), 3u);
    EXPECT_EQ(w.records_written(), 3u);
    submit(3);
    EXPECT_EQ(ordered.buffered(), 0u);
    EXPECT_EQ(ordered.next_order(), 5u);
    submit(5);  // in order: straight through
    EXPECT_EQ(ordered.buffered(), 0u);
    EXPECT_THROW(submit(5), Error);
    EXPECT_THROW(submit(1), Error);
  }
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(json::parse(lines[i])["id"], json(i));
  std::filesystem::remove(path);
}

TEST(OrderedResultWriter, DuplicateOfABufferedOrderThrows) {
  ResultWriter w("/dev/null");
  OrderedResultWriter ordered(w);
  ordered.submit(3, make_result(3, "x", "stop"));
  EXPECT_THROW(ordered.submit(3, make_result(3, "y", "stop")), Error);
  EXPECT_EQ(ordered.buffered(), 1u);
}

}  // namespace
}  // namespace tpllama
