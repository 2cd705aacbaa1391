// Error records and their ids, from input line to output record (PromptReader, RequestIntake,
// result_to_json_line): no two records share an id, a line whose id cannot be read has none, and an
// OpenAI batch record of a failed line has OpenAI's shape (tpllama issue 28, item 16).
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/request_intake.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"

namespace tpllama {
namespace {

using nlohmann::json;

// What the intake makes of each line: an error record (its Result), or a request to run (a Result
// with only its id, line and finish_reason "run").
std::vector<Result> admit_all(const std::string& content, InputFormat format) {
  std::istringstream in(content);
  PromptReader reader(in, format, RequestDefaults{}, "ids.jsonl");
  RequestGate gate(reader, /*text=*/nullptr, /*context=*/16, nullptr);
  RequestIntake intake(gate, /*text=*/nullptr,
                       IntakeOptions{/*vocab_size=*/64, /*context=*/16, /*max_seqs=*/0});
  std::vector<Result> out;
  while (std::optional<Admission> a = intake.next(true)) {
    if (a->rejected) {
      out.push_back(*a->rejected);
    } else {
      Result r;
      r.id = a->sequence->request().id;
      r.line = a->sequence->request().line;
      r.finish_reason = "run";
      out.push_back(r);
    }
  }
  return out;
}

TEST(ErrorRecordIds, ALineThatIsNotJsonHasANullIdSoItCollidesWithNoLine) {
  const std::vector<Result> got = admit_all(
      "{\"prompt\": [1, 5]}\nnot json\n{\"id\": 2, \"prompt\": [1, 6]}\n", InputFormat::kJsonl);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, json(1)) << "a readable line without an id: its line number";
  EXPECT_EQ(got[1].finish_reason, "error");
  EXPECT_TRUE(got[1].id.is_null()) << got[1].id.dump();
  EXPECT_TRUE(got[1].line_failed);
  EXPECT_EQ(got[1].line, 2u);
  EXPECT_EQ(got[2].finish_reason, "run") << got[2].error;
  EXPECT_EQ(got[2].id, json(2));
}

TEST(ErrorRecordIds, AnErrorLinesIdIsTakenSoALaterLineWithItIsANamedDuplicate) {
  const std::vector<Result> got = admit_all(
      "{\"id\": \"a\", \"prompt\": [1, 5], \"max_tokens\": 0}\n"  // an error record with id "a"
      "{\"id\": \"a\", \"prompt\": [1, 5]}\n"                     // valid, but "a" is line 1's
      "{\"prompt\": 5}\n"                  // an error record with id 3 (its line)
      "{\"id\": 3, \"prompt\": [1, 2]}\n"  // valid, but 3 is line 3's
      "{\"id\": \"a\", \"prompt\": 7}\n",  // an error whose id also repeats
      InputFormat::kJsonl);
  ASSERT_EQ(got.size(), 5u);
  for (const Result& r : got) EXPECT_EQ(r.finish_reason, "error") << "line " << r.line;
  EXPECT_EQ(got[0].id, "a");
  EXPECT_EQ(got[1].error, "line 2: duplicate id \"a\" (first on line 1); ids must be unique");
  EXPECT_TRUE(got[1].line_failed);
  EXPECT_EQ(got[2].id, json(3));
  EXPECT_EQ(got[3].error, "line 4: duplicate id 3 (first on line 3); ids must be unique");
  EXPECT_EQ(got[4].error,
            "line 5: field 'prompt' must be a string or a list of token ids, got 7; and its id "
            "\"a\" repeats line 1's "
            "(ids must be unique)");
}

std::string batch_line(const std::string& custom_id, const std::string& url,
                       const std::string& body) {
  return R"({"custom_id": )" + custom_id + R"(, "method": "POST", "url": ")" + url +
         R"(", "body": )" + body + "}\n";
}

json record(const Result& r) {
  return json::parse(result_to_json_line(r, OutputFormat::kOpenAiBatch, RecordOrigin{"m", ""}));
}

// OpenAI's output for a line that never became a request: custom_id as given (or null), no
// response, the error; for a request its endpoint refused: a 400 response and a null error.
// A key given twice in one object is the line's error record (parsers disagree on which counts),
// naming the field it is in; inside a field that changes nothing it does not matter.
TEST(ErrorRecordIds, AKeyGivenTwiceInOneObjectIsTheLinesErrorRecord) {
  const std::vector<Result> got = admit_all(
      R"({"prompt": [1, 5], "logit_bias": {"3": 100, "3": -100}})"
      "\n"
      R"({"prompt": [1, 5], "prompt": [1, 6]})"
      "\n"
      R"({"prompt": [1, 5], "metadata": {"k": 1, "k": 2}})"
      "\n"
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": [1, 5], "logit_bias": {"4": 1, "4": 2}}})"
      "\n",
      InputFormat::kJsonl);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].error,
            "line 1: not read: the key \"3\" is given twice in one object (in field "
            "'logit_bias'), and readers differ on which counts");
  EXPECT_EQ(got[1].error,
            "line 2: not read: the key \"prompt\" is given twice in one object, and readers "
            "differ on which counts");
  EXPECT_EQ(got[2].finish_reason, "run") << got[2].error;
  EXPECT_NE(got[3].error.find("the key \"4\" is given twice in one object (in field "
                              "'logit_bias')"),
            std::string::npos)
      << got[3].error;
}

TEST(ErrorRecordIds, OpenAiRecordsOfFailedLinesAndRefusedRequests) {
  const std::vector<Result> got = admit_all(
      "{\"custom_id\": \"x\", \"bo\n" +
          batch_line(R"("x")", "/v1/embeddings", R"({"input": "p"})") +
          batch_line(R"("y")", "/v1/completions", R"({"prompt": [1, 5], "suffix": "a+"})") +
          batch_line(R"("x")", "/v1/completions", R"({"prompt": [1, 5]})") +
          batch_line(R"("z")", "/v1/completions", R"({"prompt": [1, 5]})") + "[]\n",
      InputFormat::kOpenAiBatch);
  ASSERT_EQ(got.size(), 6u);
  const json unparsable = record(got[0]), envelope = record(got[1]), refused = record(got[2]),
             duplicate = record(got[3]), array = record(got[5]);
  EXPECT_TRUE(unparsable["custom_id"].is_null()) << unparsable.dump();
  EXPECT_TRUE(unparsable["response"].is_null()) << unparsable.dump();
  EXPECT_EQ(unparsable["error"]["code"], "invalid_request");
  EXPECT_EQ(unparsable["error"]["message"].get<std::string>().rfind("line 1: not valid JSON", 0),
            0u);
  EXPECT_EQ(unparsable["line"], 1);
  EXPECT_NE(unparsable["id"], array["id"])
      << "two records without a custom_id still have their own ids";

  EXPECT_EQ(envelope["custom_id"], "x");
  EXPECT_TRUE(envelope["response"].is_null()) << envelope.dump();
  EXPECT_EQ(envelope["error"]["message"],
            "line 2: field 'url' is \"/v1/embeddings\": only /v1/completions and "
            "/v1/chat/completions are supported");

  EXPECT_EQ(refused["custom_id"], "y");
  EXPECT_TRUE(refused["error"].is_null()) << refused.dump();
  EXPECT_EQ(refused["response"]["status_code"], 400);
  EXPECT_EQ(refused["response"]["body"]["error"]["type"], "invalid_request_error");
  EXPECT_EQ(refused["response"]["body"]["error"]["message"],
            "line 3: field 'body.suffix' is \"a+\": tpllama does not support it (only null, "
            "which has no "
            "effect)");

  EXPECT_EQ(duplicate["custom_id"], "x") << "line 2's custom_id was read, so line 4's repeats it";
  EXPECT_TRUE(duplicate["response"].is_null()) << duplicate.dump();
  EXPECT_EQ(duplicate["error"]["message"],
            "line 4: duplicate id \"x\" (first on line 2); ids must be unique");
  EXPECT_NE(duplicate["id"], envelope["id"])
      << "a duplicate custom_id's record has an id of its own (issue 45), not line 2's";
  EXPECT_EQ(got[4].finish_reason, "run");
  EXPECT_TRUE(array["custom_id"].is_null());
  EXPECT_EQ(array["error"]["message"], "line 6: expected a JSON object, got array");
}

}  // namespace
}  // namespace tpllama
