// Structured outputs end to end on stories260K: each kind of constraint gives what was asked (a
// JSON value with the schema's fields, a regex match, a choice, a grammar's sentence), the same
// texts whatever the scheduling (chunks, block sizes, few sequences at once, preemption), masks
// figures in --stats, and --response-format as every request's default, refused at start when
// its schema is, and part of what a resumed job must match. (Validation of many sampled records
// by python3-jsonschema: tests/oracles/structured_outputs_check.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class StructuredOutputs : public StoriesSuite<StructuredOutputs> {
 public:
  static constexpr const char* kTag = "structured";

 protected:
  static std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = work_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
};

const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "pet": {"enum": ["cat", "dog", "bird"]}, "friends": {"type": "array", "maxItems": 2,
    "items": {"type": "string", "maxLength": 8}}}, "required": ["name", "age", "pet"]})";

std::vector<json> constrained_requests() {
  const json person = json::parse(kPersonSchema);
  return {
      {{"id", "schema"},
       {"prompt", "Once upon a time"},
       {"max_tokens", 120},
       {"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", person}}}}}},
      {{"id", "regex"},
       {"prompt", "Tom saw"},
       {"max_tokens", 40},
       {"guided_regex", "[A-Z][a-z]+ (has|had) [0-9]{1,3} (cats|dogs)\\."}},
      {{"id", "choice"},
       {"prompt", "The sky was"},
       {"max_tokens", 20},
       {"guided_choice", {"blue", "grey", "full of stars"}}},
      {{"id", "grammar"},
       {"prompt", "Lily said"},
       {"max_tokens", 40},
       {"structured_outputs",
        {{"grammar",
          "root ::= greeting \" \" [A-Z] [a-z]{2,6} \"!\"\n"
          "greeting ::= \"Hello\" | \"Hi\""}}}},
      {{"id", "samples"},
       {"prompt", "The dog"},
       {"max_tokens", 30},
       {"n", 3},
       {"temperature", 1.0},
       {"seed", 9},
       {"guided_json", {{"enum", {"yes", "no", 7, nullptr}}}}},
      {{"id", "short"}, {"prompt", "A"}, {"max_tokens", 3}, {"guided_regex", "b{10}"}},
  };
}

void expect_what_was_asked(std::map<std::string, json>& records) {
  const json& schema = records["schema"];
  ASSERT_EQ(schema["finish_reason"], "stop") << schema.dump();
  const json person = json::parse(schema["text"].get<std::string>());
  EXPECT_TRUE(person["name"].is_string() && person["name"].get<std::string>().size() <= 12);
  // An integer of any length (one past int64 reads as a double here).
  EXPECT_TRUE(person["age"].is_number_integer() ||
              (person["age"].is_number_float() &&
               std::floor(person["age"].get<double>()) == person["age"].get<double>()))
      << person.dump();
  EXPECT_TRUE(person["pet"] == "cat" || person["pet"] == "dog" || person["pet"] == "bird");
  for (auto it = person.begin(); it != person.end(); ++it)
    EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "pet" ||
                it.key() == "friends")
        << it.key();

  const json& regex = records["regex"];
  ASSERT_EQ(regex["finish_reason"], "stop") << regex.dump();
  EXPECT_TRUE(std::regex_match(regex["text"].get<std::string>(),
                               std::regex("[A-Z][a-z]+ (has|had) [0-9]{1,3} (cats|dogs)\\.")))
      << regex.dump();

  const std::string choice = records["choice"]["text"];
  EXPECT_TRUE(choice == "blue" || choice == "grey" || choice == "full of stars") << choice;
  EXPECT_EQ(records["choice"]["finish_reason"], "stop");

  const json& grammar = records["grammar"];
  ASSERT_EQ(grammar["finish_reason"], "stop") << grammar.dump();
  EXPECT_TRUE(std::regex_match(grammar["text"].get<std::string>(),
                               std::regex("(Hello|Hi) [A-Z][a-z]{2,6}!")))
      << grammar.dump();

  for (const json& c : records["samples"]["choices"]) {
    ASSERT_EQ(c["finish_reason"], "stop") << c.dump();
    const json v = json::parse(c["text"].get<std::string>());
    EXPECT_TRUE(v == "yes" || v == "no" || v == 7 || v.is_null()) << c.dump();
  }

  // Cut by max_tokens: "length", its text a prefix of a match, never "stop".
  EXPECT_EQ(records["short"]["finish_reason"], "length");
  EXPECT_EQ(records["short"]["text"], "bbb");
}

TEST_F(StructuredOutputs, EachKindGivesWhatWasAskedTheSameInAnyScheduling) {
  const std::vector<json> requests = constrained_requests();
  std::map<std::string, json> first;
  for (const std::string& flags : std::vector<std::string>{
           " --stats " + work_ + "/stats.json", " --kv-block-size 3",
           " --max-seqs 3 --max-batch-tokens 5", " --kv-cache-memory 700KB --kv-block-size 4"}) {
    SCOPED_TRACE("flags:" + flags);
    std::map<std::string, json> records = run_requests("kinds", requests, flags);
    ASSERT_EQ(records.size(), requests.size());
    expect_what_was_asked(records);
    if (first.empty()) {
      first = records;
      continue;
    }
    for (const auto& [id, record] : records) EXPECT_EQ(record, first[id]) << id;
  }
  std::ifstream f(work_ + "/stats.json");
  const json so = json::parse(f)["structured_outputs"];
  EXPECT_EQ(so["requests"], 6);
  EXPECT_EQ(so["grammars_compiled"], 6);
  EXPECT_GT(so["masks"].get<long long>(), so["masks_walked"].get<long long>())
      << "some masks are memoized: " << so.dump();
  EXPECT_GT(so["mask_seconds"]["count"].get<long long>(), 0);
}

TEST_F(StructuredOutputs, ResponseFormatIsEveryRequestsDefaultAndRefusedAtStartWhenItsSchemaIs) {
  const std::string format = write_file(
      "person.json", std::string(R"({"type": "json_schema", "json_schema": {"name": "p", )") +
                         R"("schema": )" + kPersonSchema + "}}");
  const std::vector<json> requests = {
      {{"id", "default"}, {"prompt", "Once upon a time"}, {"max_tokens", 120}},
      {{"id", "free"},
       {"prompt", "Once upon a time"},
       {"max_tokens", 10},
       {"response_format", {{"type", "text"}}}},
      {{"id", "own"}, {"prompt", "Once upon a time"}, {"max_tokens", 10}, {"guided_choice", {"x"}}},
      {{"id", "score"}, {"context", "Once upon a time"}, {"continuation", " there"}},
  };
  std::map<std::string, json> records =
      run_requests("default", requests, " --response-format " + format);
  ASSERT_EQ(records.size(), requests.size());
  ASSERT_EQ(records["default"]["finish_reason"], "stop") << records["default"].dump();
  EXPECT_TRUE(json::parse(records["default"]["text"].get<std::string>())["age"].is_number());
  EXPECT_NE(records["free"]["text"].get<std::string>().substr(0, 1), "{")
      << "response_format text lifts the default";
  EXPECT_EQ(records["own"]["text"], "x");
  EXPECT_TRUE(records["score"].contains("logprob") && !records["score"].contains("error"))
      << "a score is not constrained: " << records["score"].dump();

  // A resume must ask for what the records were made with.
  const std::string in = work_ + "/default.jsonl", out = work_ + "/default_out.jsonl";
  const CommandResult other = run_shell(binary() + " run --model " + model_ + " --input " + in +
                                        " --output " + out + " --resume --response-format " +
                                        write_file("other.json", R"({"type": "json_object"})"));
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find("--response-format"), std::string::npos) << other.output;

  // A schema the engine refuses ends the run before it starts, naming the file and the keyword.
  const std::string bad = write_file("bad.json", R"({"json": {"type": "object", "not": {}}})");
  const CommandResult refused =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + work_ +
                "/bad_out.jsonl --response-format " + bad);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(
      refused.output.find("--response-format " + bad + ": JSON schema at #: the keyword 'not'"),
      std::string::npos)
      << refused.output;
  EXPECT_FALSE(std::ifstream(work_ + "/bad_out.jsonl").good()) << "no output was started";
}

TEST_F(StructuredOutputs, RefusedConstraintsAreTheirRequestsErrorRecords) {
  const std::vector<json> requests = {
      {{"id", "keyword"},
       {"prompt", "A"},
       {"guided_json", {{"type", "string"}, {"format", "ipv4"}}}},
      {{"id", "regex"}, {"prompt", "A"}, {"guided_regex", "(?=a)b"}},
      {{"id", "grammar"}, {"prompt", "A"}, {"guided_grammar", "root ::= root \"a\""}},
      {{"id", "fine"}, {"prompt", "A"}, {"max_tokens", 5}, {"guided_regex", "[a-z]+"}},
      // SentencePiece drops the first piece's space when no text precedes it: the grammar, which
      // reads token bytes, would count a space the text does not have.
      {{"id", "empty"}, {"prompt", ""}, {"guided_choice", {" yes", "no"}}},
  };
  std::map<std::string, json> records = run_requests("refused", requests);
  ASSERT_EQ(records.size(), requests.size());
  for (const char* id : {"keyword", "regex", "grammar", "empty"}) {
    EXPECT_EQ(records[id]["finish_reason"], "error") << records[id].dump();
    EXPECT_EQ(records[id]["error"].get<std::string>().rfind("line ", 0), 0u);
  }
  EXPECT_NE(records["keyword"]["error"].get<std::string>().find("ipv4"), std::string::npos);
  EXPECT_NE(records["regex"]["error"].get<std::string>().find("'(?=' at offset 2 is not supported"),
            std::string::npos)
      << records["regex"]["error"];
  EXPECT_NE(records["grammar"]["error"].get<std::string>().find("is left-recursive"),
            std::string::npos)
      << records["grammar"]["error"];
  EXPECT_NE(
      records["empty"]["error"].get<std::string>().find("drops the completion's leading space"),
      std::string::npos)
      << records["empty"]["error"];
  EXPECT_NE(records["fine"]["finish_reason"], "error");
}

}  // namespace
