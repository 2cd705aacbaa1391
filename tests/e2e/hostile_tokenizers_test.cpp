// Issue 28's hostile tokenizer.json files and request lines, through the binary: a line nested past
// the JSON limit, a prompt past PCRE2's match limit or past the normalizer's growth bound are their
// own requests' error records while the good requests around them are answered; ids far past a
// file's tokens and a Sequence nested 30,000 deep are refused at load, by name, at once; memory
// stays under 1 GiB throughout, and running out of it names the line or the file.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

constexpr long kOneGibInKib = 1L << 20;

// A BPE model over the printable ASCII characters ("<unk>" and 95 more: ids below stories260K's
// 512).
json ascii_tokenizer() {
  json vocab = {{"<unk>", 0}};
  for (int c = 0x20; c < 0x7F; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 0x1F;
  json model = {
      {"type", "BPE"}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", json::array()}};
  return {{"added_tokens", json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},     {"decoder", nullptr},    {"model", model}};
}

class HostileTokenizers : public StoriesSuite<HostileTokenizers> {
 public:
  static constexpr const char* kTag = "hostile_tok";

 protected:
  // stories260K's weights with tokenizer.json `text` in place of its SentencePiece model.
  std::string model_with(const std::string& name, const std::string& text) {
    const std::string dir = work_ + "/" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* file : {"config.json", "model.safetensors"})
      fs::copy_file(model_ + "/" + file, dir + "/" + file);
    std::ofstream(dir + "/tokenizer.json") << text;
    return dir;
  }
  // Three requests: good, `bad`, good.
  std::string three_lines(const std::string& name, const std::string& bad_line) {
    const std::string path = work_ + "/" + name + ".jsonl";
    std::ofstream(path) << R"({"id": "good1", "prompt": "Once upon"})"
                        << "\n"
                        << bad_line << "\n"
                        << R"({"id": "good2", "prompt": "The dog"})"
                        << "\n";
    return path;
  }
  // tpllama run, its peak memory measured; `limit_kib` > 0 runs it under that address-space limit.
  ProcessExit run(const std::string& model, const std::string& input, const std::string& flags = "",
                  long limit_kib = 0) {
    out_ = input + ".out.jsonl";
    const std::string log = input + ".log";
    fs::remove(out_);
    const std::string cmd = binary() + " run --model " + model + " --input " + input +
                            " --output " + out_ + " --max-tokens 4 --log-interval 0" + flags;
    const std::string ulimit = limit_kib > 0 ? "ulimit -v " + std::to_string(limit_kib) + "; " : "";
    const pid_t pid =
        spawn_shell("sh -c '" + ulimit + "exec " + cmd + "' >" + log + " 2>&1", /*new_group=*/true);
    return wait_for_exit(pid, log, std::chrono::seconds(120));
  }
  // The three records of three_lines: the good ones answered, the bad one's error returned (its id
  // `bad` as JSON: a line refused unread has a null id, as OpenAI gives it).
  std::string bad_record_error(const ProcessExit& e, const std::string& bad = "\"bad\"") {
    EXPECT_EQ(e.code, 0) << e.log;
    EXPECT_LT(e.max_rss_kib, kOneGibInKib) << "peak memory " << e.max_rss_kib << " KiB";
    std::map<std::string, json> records = by_id(read_jsonl(out_));
    EXPECT_EQ(records.size(), 3u) << e.log;
    for (const char* id : {"\"good1\"", "\"good2\""}) {
      EXPECT_EQ(records.count(id), 1u) << id << " not answered:\n" << e.log;
      if (records.count(id)) {
        EXPECT_NE(records[id]["finish_reason"], "error") << records[id];
      }
    }
    if (!records.count(bad)) return "no record for the bad request";
    EXPECT_EQ(records[bad]["finish_reason"], "error");
    return records[bad].value("error", "");
  }

  std::string out_;
};

// A message with an extra key nested 20,000 deep (a 40 KB line) crashed the job with no record.
TEST_F(HostileTokenizers, ADeepChatMessageIsItsLinesErrorRecord) {
  const std::string tmpl = work_ + "/concat.jinja";
  std::ofstream(tmpl) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  const std::string head =
      R"({"id": "bad", "messages": [{"role": "user", "content": "Hi", "extra": )";
  const std::string in =
      three_lines("deep", head + std::string(20000, '[') + std::string(20000, ']') + "}]}");
  const std::string error = bad_record_error(run(model_, in, " --chat-template " + tmpl), "null");
  // The line, "messages" and the message are levels 1-3: the 254th '[' opens level 257.
  EXPECT_EQ(error, "line 2: not read: JSON nested deeper than 256 levels (at byte " +
                       std::to_string(head.size() + 253) + ")");
}

// (a+)+$ over 5,000 'a' and a 'b' hits PCRE2's match limit: it aborted the job, no record written.
TEST_F(HostileTokenizers, ARegexPastTheMatchLimitIsThatRequestsErrorRecord) {
  json tok = ascii_tokenizer();
  tok["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a+)+$"}}}, {"behavior", "Isolated"}};
  const std::string model = model_with("regex", tok.dump());
  const std::string in =
      three_lines("regex", json{{"id", "bad"}, {"prompt", std::string(5000, 'a') + "b"}}.dump());
  EXPECT_EQ(bad_record_error(run(model, in)),
            "line 2: the tokenizer's regex '(a+)+$' gave up at byte 0 of a 5001-byte text: match "
            "limit exceeded (the "
            "limit is 10000000 steps)");
}

// A Replace whose content is 100,000 bytes, on a 5,001-byte prompt: 6.9 GB, then the job aborted.
// Its bound is 16 * 5001 + 4096 = 84,112 bytes.
TEST_F(HostileTokenizers, ANormalizerOutgrowingItsBoundIsThatRequestsErrorRecord) {
  json tok = ascii_tokenizer();
  tok["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(100000, 'x')}};
  const std::string model = model_with("normalizer", tok.dump());
  const std::string in = three_lines(
      "normalizer", json{{"id", "bad"}, {"prompt", std::string(5000, 'a') + "b"}}.dump());
  EXPECT_EQ(bad_record_error(run(model, in)),
            "line 2: the tokenizer's normalizer (step 1 of 1, Replace) would make a 5001-byte text "
            "more than 84112 "
            "bytes (16 times it plus 4096): not tokenized");
}

// A decoder Replace of a megabyte for every match (issue 45): 3.4 GB, then a bad_alloc abort at
// load. Under a 1 GiB address-space limit it is refused at load, by name, with no signal.
TEST_F(HostileTokenizers, ADecoderReplaceOutgrowingItsTokenBoundIsRefusedAtLoad) {
  json tok = ascii_tokenizer();
  tok["decoder"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(1000000, 'x')}};
  const std::string model = model_with("decoder_replace", tok.dump());
  const ProcessExit e = run(
      model, three_lines("decoder_replace", R"({"id": "bad", "prompt": "x"})"), "", kOneGibInKib);
  EXPECT_EQ(e.code, 1) << e.log;
  EXPECT_LT(e.seconds, 20) << e.log;
  std::printf("decoder Replace: peak memory %ld KiB\n", e.max_rss_kib);
  EXPECT_LT(e.max_rss_kib, kOneGibInKib) << "peak memory " << e.max_rss_kib << " KiB";
  EXPECT_NE(e.log.find(model + "/tokenizer.json: decoder: Replace makes the token \"a\" more "
                               "than 4096 bytes (its content is 1000000 bytes): refused"),
            std::string::npos)
      << e.log;
}

// A 36 MB line of 12 million empty arrays (issue 45) took more than a gigabyte to parse and aborted
// the job with no record for any line. Under a 1 GiB address-space limit it is its own error
// record, refused unparsed, and the lines around it are answered.
TEST_F(HostileTokenizers, ALineOfTwelveMillionValuesIsItsErrorRecord) {
  std::string arrays = "[";
  arrays.reserve(36000002);
  for (int i = 0; i < 12000000; ++i) arrays += i ? ",[]" : "[]";
  arrays += "]";
  const std::string in =
      three_lines("many_values", R"({"id": "bad", "prompt": "x", "logit_bias": )" + arrays + "}");
  const ProcessExit e = run(model_, in, "", kOneGibInKib);
  std::printf("12 million values: peak memory %ld KiB\n", e.max_rss_kib);
  // '{' and the head's two commas are values 1 to 3, the outer '[' the fourth; the k-th "[]" after
  // the first is value 5 + 2k at its '[' (byte 44 + 3k after the 43-byte head): value 4194305 is
  // k = 2097150's.
  EXPECT_EQ(bad_record_error(e, "null"),
            "line 2: not read: JSON of more than 4194304 values (at byte 6291494)")
      << "refused unread, its id unread too";
}

// A vocab id of 50,000,000 in a 96-token vocabulary took 6.4 GB and 28 s before the mismatch was
// named; an added token's id of 1e9 ended in a bare bad_alloc. Both are named at once now.
TEST_F(HostileTokenizers, IdsFarPastTheFilesTokensAreRefusedAtOnce) {
  json vocab_id = ascii_tokenizer();
  vocab_id["model"]["vocab"]["~"] = 50000000;
  json added_id = ascii_tokenizer();
  added_id["added_tokens"] = {{{"id", 1000000000}, {"content", "<s>"}, {"special", true}}};
  const std::vector<std::pair<json, std::string>> cases = {
      {vocab_id, "model: vocab entry '~' has id 50000000, but the file holds 96 tokens"},
      {added_id, "added_tokens[0] has id 1000000000, but the file holds 97 tokens"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string model = model_with("ids" + std::to_string(i), cases[i].first.dump());
    const ProcessExit e =
        run(model, three_lines("ids" + std::to_string(i), R"({"id": "bad", "prompt": "x"})"));
    EXPECT_EQ(e.code, 1) << e.log;
    EXPECT_LT(e.seconds, 20) << e.log;
    EXPECT_LT(e.max_rss_kib, kOneGibInKib) << "peak memory " << e.max_rss_kib << " KiB";
    EXPECT_NE(e.log.find(model + "/tokenizer.json: " + cases[i].second), std::string::npos)
        << e.log;
  }
}

// A pre_tokenizer Sequence nested 30,000 deep took 5.1 GB: the JSON nesting limit refuses it as
// read.
TEST_F(HostileTokenizers, ASequenceNestedThirtyThousandDeepIsRefusedAtOnce) {
  std::string deep;
  for (int i = 0; i < 30000; ++i) deep += R"({"type":"Sequence","pretokenizers":[)";
  deep += R"({"type":"Split","pattern":{"String":" "},"behavior":"Isolated","invert":false})";
  for (int i = 0; i < 30000; ++i) deep += "]}";
  json tok = ascii_tokenizer();
  tok["pre_tokenizer"] = "DEEP_SEQUENCE";
  std::string text = tok.dump();
  text.replace(text.find("\"DEEP_SEQUENCE\""), 15, deep);
  const std::string model = model_with("deep_sequence", text);
  const ProcessExit e = run(model, three_lines("deep_sequence", R"({"id": "bad", "prompt": "x"})"));
  EXPECT_EQ(e.code, 1) << e.log;
  EXPECT_LT(e.seconds, 20) << e.log;
  EXPECT_LT(e.max_rss_kib, kOneGibInKib) << "peak memory " << e.max_rss_kib << " KiB";
  EXPECT_NE(e.log.find(model + "/tokenizer.json: JSON nested deeper than 256 levels"),
            std::string::npos)
      << e.log;
}

// A 40 MB prompt tokenized (`tokenize` fits no context) under a 1.2 GB address-space limit: the
// tokenizer runs out of memory. That ended the job with a bare "error: std::bad_alloc"; it is the
// line's error record now, and the line after it is tokenized.
TEST_F(HostileTokenizers, RunningOutOfMemoryOnALineNamesTheLine) {
  const std::string model = model_with("oom", ascii_tokenizer().dump());
  const std::string in =
      three_lines("oom", json{{"id", "bad"}, {"prompt", std::string(40000000, 'x')}}.dump());
  const std::string out = in + ".tokens.jsonl", log = in + ".tokenize.log";
  const std::string cmd =
      binary() + " tokenize --model " + model + " --input " + in + " --output " + out;
  const ProcessExit e =
      wait_for_exit(spawn_shell("sh -c 'ulimit -v 1200000; exec " + cmd + "' >" + log + " 2>&1",
                                /*new_group=*/true),
                    log, std::chrono::seconds(240));
  EXPECT_EQ(e.code, 0) << e.log;
  EXPECT_EQ(e.log.find("std::bad_alloc"), std::string::npos) << e.log;
  std::map<std::string, json> records = by_id(read_jsonl(out));
  ASSERT_EQ(records.size(), 3u) << e.log;
  EXPECT_EQ(records["\"bad\""]["error"],
            "line 2: out of memory turning the request into tokens (its text is 40000000 bytes)");
  EXPECT_EQ(records["\"good2\""]["tokens"],
            json::array({'T' - 0x1F, 'h' - 0x1F, 'e' - 0x1F, ' ' - 0x1F, 'd' - 0x1F, 'o' - 0x1F,
                         'g' - 0x1F}));
}

}  // namespace
