// prepare_resume: torn-line repair (bytes checked on disk), per-id record counts in both output
// formats, and refusal of files that are not tpllama output. The same for perplexity's windows
// file (read_window_file).
#include "io/resume.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "io/window_file.h"

namespace tpllama {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / name).string();
}

std::string write_file(const std::string& name, const std::string& content) {
  auto path = temp_path(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(PrepareResume, MissingFileGivesAnEmptyIndexAndCreatesNothing) {
  auto path = temp_path("resume_missing.jsonl");
  std::filesystem::remove(path);
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_TRUE(index.done.empty());
  EXPECT_EQ(index.records, 0u);
  EXPECT_EQ(index.truncated_bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(PrepareResume, TornLastLineIsCutAtTheLastNewline) {
  const std::string complete =
      "{\"id\":\"a\",\"text\":\"x\",\"prompt_tokens\":1,\"completion_tokens\":1,"
      "\"finish_reason\":\"stop\"}\n"
      "{\"id\":2,\"text\":\"y\",\"prompt_tokens\":1,\"completion_tokens\":1,"
      "\"finish_reason\":\"length\"}\n";
  const std::string torn = "{\"id\":\"b\",\"text\":\"unfini";
  auto path = write_file("resume_torn.jsonl", complete + torn);
  ASSERT_EQ(read_file(path), complete + torn);
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_EQ(read_file(path), complete);
  EXPECT_EQ(index.truncated_bytes, torn.size());
  EXPECT_EQ(index.records, 2u);
  EXPECT_EQ(index.done.size(), 2u);
  EXPECT_EQ(index.done.count("\"b\""), 0u);
  EXPECT_EQ(index.done.at("\"a\""), 1);
  EXPECT_EQ(index.done.at("2"), 1);
  std::filesystem::remove(path);
}

TEST(PrepareResume, FileWithoutAnyNewlineIsEmptied) {
  auto path = write_file("resume_no_newline.jsonl", "{\"id\":1,\"te");
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_EQ(index.truncated_bytes, 11u);
  EXPECT_EQ(index.records, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  std::filesystem::remove(path);
}

TEST(PrepareResume, IntactFileIsLeftByteForByte) {
  const std::string content = "{\"id\":\"a\",\"finish_reason\":\"stop\"}\n";
  auto path = write_file("resume_intact.jsonl", content);
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_EQ(index.truncated_bytes, 0u);
  EXPECT_EQ(read_file(path), content);
  std::filesystem::remove(path);
}

TEST(PrepareResume, CountsPerIdAndErrorRecords) {
  auto path = write_file("resume_counts.jsonl",
                         "{\"id\":\"a\",\"finish_reason\":\"stop\"}\n"
                         "{\"id\":3,\"finish_reason\":\"error\",\"error\":\"line 3: bad\"}\n"
                         "{\"id\":\"3\",\"finish_reason\":\"stop\"}\n");
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_EQ(index.records, 3u);
  EXPECT_EQ(index.done.size(), 3u);
  EXPECT_EQ(index.done.at("\"a\""), 1);
  EXPECT_EQ(index.done.at("3"), 1);      // the error record is a final result
  EXPECT_EQ(index.done.at("\"3\""), 1);  // a string id is not the integer id
  EXPECT_EQ(index.done.at(id_key(nlohmann::json("a"))), 1);
  EXPECT_TRUE(index.duplicates.empty());
  std::filesystem::remove(path);
}

// An input's ids are unique, so a second record of an id is a duplicate: reported with both lines,
// and not taken as the answer to a second request of that id (nor left over as "unmatched").
TEST(PrepareResume, ASecondRecordOfAnIdIsReportedAsADuplicate) {
  auto path = write_file("resume_duplicates.jsonl",
                         "{\"id\":\"a\",\"finish_reason\":\"stop\",\"prompt_tokens\":2}\n"
                         "{\"id\":\"b\",\"finish_reason\":\"stop\"}\n"
                         "{\"id\":\"a\",\"finish_reason\":\"length\"}\n");
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_EQ(index.records, 3u);
  EXPECT_EQ(index.done.at("\"a\""), 1);
  ASSERT_EQ(index.by_id.at("\"a\"").size(), 1u);
  EXPECT_EQ(index.by_id.at("\"a\"")[0].tokens, 2) << "the first record answers";
  ASSERT_EQ(index.duplicates.size(), 1u);
  EXPECT_EQ(index.duplicates[0].id, "\"a\"");
  EXPECT_EQ(index.duplicates[0].first_line, 1u);
  EXPECT_EQ(index.duplicates[0].line, 3u);
  std::filesystem::remove(path);
}

TEST(PrepareResume, OpenAiFormatKeysOnCustomId) {
  auto path =
      write_file("resume_openai.jsonl",
                 "{\"id\":\"batch_req_1\",\"custom_id\":\"r1\",\"response\":{},\"error\":null}\n"
                 "{\"id\":\"batch_req_2\",\"custom_id\":\"r2\",\"response\":{},\"error\":{}}\n"
                 "{\"id\":\"batch_req_1\",\"custom_id\":\"r1\",\"response\":{},\"error\":null}\n");
  ResumeIndex index = prepare_resume(path, OutputFormat::kOpenAiBatch);
  EXPECT_EQ(index.records, 3u);
  EXPECT_EQ(index.done.at("\"r1\""), 1);
  EXPECT_EQ(index.duplicates.size(), 1u);
  EXPECT_EQ(index.done.at("\"r2\""), 1);
  EXPECT_EQ(index.done.count("\"batch_req_1\""), 0u);
  std::filesystem::remove(path);
}

// Each record's token count, for checking a resumed request against it: a generation's
// prompt_tokens, a scoring record's n_tokens, OpenAI's usage.prompt_tokens; none for errors.
TEST(PrepareResume, RecordsGiveTheirTokenCountsInFileOrder) {
  auto path = write_file("resume_token_counts.jsonl",
                         "{\"id\":\"a\",\"text\":\"x\",\"prompt_tokens\":7,\"completion_tokens\":1,"
                         "\"finish_reason\":\"stop\"}\n"
                         "{\"id\":\"s\",\"logprob\":-3.5,\"is_greedy\":false,\"n_tokens\":4}\n"
                         "{\"id\":\"e\",\"text\":\"\",\"prompt_tokens\":9,\"completion_tokens\":0,"
                         "\"finish_reason\":\"error\",\"error\":\"too long\"}\n"
                         "{\"id\":\"b\",\"text\":\"y\",\"prompt_tokens\":3,\"completion_tokens\":1,"
                         "\"finish_reason\":\"stop\"}\n");
  ResumeIndex index = prepare_resume(path, OutputFormat::kJsonl);
  EXPECT_EQ(index.path, path);
  ASSERT_EQ(index.by_id.at("\"a\"").size(), 1u);
  EXPECT_EQ(index.by_id.at("\"a\"")[0].tokens, 7);
  EXPECT_EQ(index.by_id.at("\"a\"")[0].line, 1u);
  EXPECT_FALSE(index.by_id.at("\"a\"")[0].scoring);
  EXPECT_TRUE(index.by_id.at("\"s\"")[0].scoring);
  EXPECT_EQ(index.by_id.at("\"s\"")[0].tokens, 4);
  EXPECT_EQ(index.by_id.at("\"e\"")[0].tokens, -1) << "an error record gives no count";
  EXPECT_EQ(index.by_id.at("\"b\"")[0].line, 4u);
  std::filesystem::remove(path);

  path = write_file(
      "resume_counts_openai.jsonl",
      "{\"id\":\"batch_req_1\",\"custom_id\":\"r1\",\"response\":{\"status_code\":200,"
      "\"body\":{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}},\"error\":null}\n"
      "{\"id\":\"batch_req_2\",\"custom_id\":\"r2\",\"response\":{\"status_code\":400,"
      "\"body\":{\"usage\":{\"prompt_tokens\":5}}},\"error\":{\"code\":\"invalid_request\"}}\n");
  index = prepare_resume(path, OutputFormat::kOpenAiBatch);
  EXPECT_EQ(index.by_id.at("\"r1\"")[0].tokens, 5);
  EXPECT_EQ(index.by_id.at("\"r2\"")[0].tokens, -1);
  std::filesystem::remove(path);
}

void expect_refused(const std::string& name, const std::string& content, OutputFormat format,
                    const std::string& expected_start) {
  auto path = write_file(name, content);
  try {
    prepare_resume(path, format);
    ADD_FAILURE() << "expected tpllama::Error for " << name;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot resume from " + path + ": " + expected_start, 0),
              0u)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("not a tpllama output"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(PrepareResume, CompleteLineThatIsNotARecordThrowsNamingTheLine) {
  expect_refused("resume_bad_json.jsonl", "{\"id\":1}\n{\"id\":2}\nhello world\n",
                 OutputFormat::kJsonl, "line 3 is not valid JSON");
  expect_refused("resume_no_id.jsonl", "{\"id\":1}\n{\"text\":\"x\"}\n", OutputFormat::kJsonl,
                 "line 2 has no string or integer 'id' field");
  expect_refused("resume_array.jsonl", "[1,2]\n", OutputFormat::kJsonl,
                 "line 1 is a JSON array, not an object");
  // An output of the other format belongs to another input: refused both ways.
  expect_refused("resume_wrong_format.jsonl", "{\"id\":\"a\",\"finish_reason\":\"stop\"}\n",
                 OutputFormat::kOpenAiBatch,
                 "line 1 is a tpllama JSONL record, but this input's output is OpenAI batch");
  expect_refused("resume_wrong_format2.jsonl",
                 "{\"id\":\"batch_req_1\",\"custom_id\":\"a\",\"response\":{},\"error\":null}\n",
                 OutputFormat::kJsonl,
                 "line 1 is an OpenAI batch record, but this input's output is tpllama JSONL");
}

TEST(PrepareResume, DirectoryIsRefused) {
  EXPECT_THROW(prepare_resume(testing::TempDir(), OutputFormat::kJsonl), Error);
}

WindowRun a_window_run(long long corpus_tokens, std::vector<int> corpus, int context_len,
                       int stride, long long windows) {
  return WindowRun{"llama-7b",          "00112233aabbccdd", "bf16", "f32",  corpus_tokens,
                   corpus_hash(corpus), context_len,        stride, windows};
}

TEST(WindowFile, ScoresReadBackExactlyAndTheTornLineIsLeftForTheCaller) {
  const WindowRun run = a_window_run(1000, {5, 6, 7}, 64, 31, 32);
  const WindowScore a{0, 63, 0.1 + 0.2}, b{1, 31, 123.456789012345678};
  const std::string kept = window_run_line(run) + window_score_line(a) + window_score_line(b);
  const std::string torn = "{\"window\": 2, \"n_tok";
  const std::string path = write_file("windows_torn.jsonl", kept + torn);
  const WindowFile file = read_window_file(path);
  EXPECT_EQ(read_file(path), kept + torn) << "reading changes nothing";
  EXPECT_EQ(file.torn_bytes, torn.size());
  ASSERT_TRUE(file.run.has_value());
  EXPECT_EQ(window_run_difference(*file.run, run), "");
  EXPECT_EQ(file.run->model, "llama-7b");
  EXPECT_EQ(file.run->model_fingerprint, "00112233aabbccdd");
  EXPECT_EQ(file.run->dtype, "bf16");
  EXPECT_EQ(file.run->kv_dtype, "f32");
  ASSERT_EQ(file.scores.size(), 2u);
  EXPECT_EQ(file.scores[0].window, 0);
  EXPECT_EQ(file.scores[0].n_tokens, 63);
  EXPECT_EQ(file.scores[0].nll, 0.1 + 0.2);  // bit for bit: the sum over windows must not drift
  EXPECT_EQ(file.scores[1].window, 1);
  EXPECT_EQ(file.scores[1].nll, 123.456789012345678);
  EXPECT_EQ(cut_torn_last_line(path), torn.size());
  EXPECT_EQ(read_file(path), kept);
}

// A file of one unterminated line is a torn header only if that line starts as a header does.
TEST(WindowFile, ATornHeaderIsToldFromAnotherFile) {
  const std::string header = window_run_line(a_window_run(10, {1}, 8, 4, 2));
  const WindowFile torn =
      read_window_file(write_file("windows_torn_header.jsonl", header.substr(0, 30)));
  EXPECT_FALSE(torn.run.has_value());
  EXPECT_EQ(torn.torn_bytes, 30u);
  EXPECT_EQ(torn.torn_start, header.substr(0, 30));
  EXPECT_TRUE(starts_like_a_window_header(torn.torn_start));
  EXPECT_TRUE(starts_like_a_window_header("{\"perp"));
  EXPECT_FALSE(starts_like_a_window_header("xxxx"));
  EXPECT_FALSE(
      starts_like_a_window_header("{\"id\": 1, \"text\": \"a very long line of another output\""));
  const WindowFile junk =
      read_window_file(write_file("windows_junk.jsonl", std::string(5000, 'x')));
  EXPECT_EQ(junk.torn_bytes, 5000u);
  EXPECT_EQ(junk.torn_start, std::string(64, 'x'));
}

TEST(WindowFile, MissingOrEmptyNamesNoRun) {
  EXPECT_FALSE(read_window_file(temp_path("windows_missing.jsonl")).run.has_value());
  const WindowFile empty = read_window_file(write_file("windows_empty.jsonl", ""));
  EXPECT_FALSE(empty.run.has_value());
  EXPECT_TRUE(empty.scores.empty());
}

TEST(WindowFile, OtherFilesAreRefusedNamingTheLine) {
  const auto expect_refused = [](const std::string& path, const std::string& why) {
    try {
      read_window_file(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const std::string header = window_run_line(a_window_run(10, {1}, 8, 4, 2));
  expect_refused(write_file("windows_run_output.jsonl", "{\"id\":1,\"text\":\"x\"}\n"),
                 "line 1 has no \"perplexity_windows\" object");
  expect_refused(
      write_file(
          "windows_no_model.jsonl",
          R"({"perplexity_windows":{"corpus_tokens":10,"corpus_hash":"a","context_len":8,"stride":4,"windows":2}})"
          "\n"),
      "line 1 does not give model, model_fingerprint, dtype");
  expect_refused(
      write_file("windows_bad_nll.jsonl", header + window_score_line({0, 7, 1.0}) +
                                              "{\"window\":1,\"n_tokens\":4,\"nll\":\"x\"}\n"),
      "line 3 does not give a window, its n_tokens and a finite nll");
  expect_refused(
      write_file("windows_negative.jsonl", header + "{\"window\":-1,\"n_tokens\":4,\"nll\":1}\n"),
      "line 2 does not give");
  expect_refused(write_file("windows_not_json.jsonl", header + "hello\n"), "line 2 is not JSON");
  expect_refused(testing::TempDir(), "is not a regular file");
}

TEST(WindowFile, AnotherRunIsDescribedFieldByField) {
  const WindowRun here = a_window_run(1000, {1, 2}, 64, 31, 32);
  WindowRun there = here;
  there.stride = 20;
  there.context_len = 128;
  there.windows = 45;
  EXPECT_EQ(window_run_difference(there, here),
            "context_len 128 there, 64 here; stride 20 there, 31 here");
  there = here;
  there.corpus_hash = corpus_hash({2, 1});
  EXPECT_EQ(window_run_difference(there, here),
            "corpus hash " + there.corpus_hash + " there, " + here.corpus_hash + " here");
  there = here;
  there.model = "llama-7b-chat";
  EXPECT_EQ(window_run_difference(there, here), "")
      << "the same files under another name (a staged copy)";
  there.model_fingerprint = "ffffffffffffffff";
  there.kv_dtype = "bf16";
  EXPECT_EQ(window_run_difference(there, here),
            "model llama-7b-chat (fingerprint ffffffffffffffff) there, llama-7b (fingerprint "
            "00112233aabbccdd) here; "
            "kv_dtype bf16 there, f32 here");
  EXPECT_NE(corpus_hash({1, 2}), corpus_hash({2, 1}));
  EXPECT_EQ(corpus_hash({}), "cbf29ce484222325");  // FNV-1a 64's offset basis: nothing hashed
}

// The fingerprint follows the files' bytes, not the directory's name: a copy matches, one changed
// byte of a weight file in a sampled block (the first, the last) or of config.json does not.
TEST(WindowFile, ModelFingerprintFollowsTheFilesNotTheName) {
  namespace fs = std::filesystem;
  const fs::path base = fs::path(testing::TempDir()) / "fingerprint";
  fs::remove_all(base);
  const auto make_model = [&](const std::string& name, size_t changed_byte,
                              const std::string& config) {
    const fs::path dir = base / name;
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config;
    std::string weights(1 << 20, '\0');
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 7 % 251);
    if (changed_byte < weights.size()) weights[changed_byte] ^= 1;
    std::ofstream(dir / "model.safetensors", std::ios::binary) << weights;
    std::ofstream(dir / "notes.txt") << name;  // not part of the model
    return model_fingerprint(dir.string());
  };
  const std::string config = R"({"hidden_size": 64})";
  const std::string original = make_model("a", SIZE_MAX, config);
  EXPECT_EQ(make_model("copy-of-a", SIZE_MAX, config), original);
  EXPECT_NE(make_model("first-byte", 0, config), original);
  EXPECT_NE(make_model("last-byte", (1 << 20) - 1, config), original);
  EXPECT_NE(make_model("config", SIZE_MAX, R"({"hidden_size": 65})"), original);
  fs::remove_all(base);
}

}  // namespace
}  // namespace tpllama
