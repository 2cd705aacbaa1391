// Structured-output requests: each field of OpenAI's and vLLM's APIs read into its constraint, the
// --response-format default, refusals naming the field; the compiled-grammar cache; and a
// constrained sequence on the real stories260K vocabulary (StructuredOutputs and the output side
// as the engine wires them) — its masks, where it may stop, and its finish.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/output_grammar.h"
#include "engine/sequence.h"
#include "engine/structured_outputs.h"
#include "engine_test_util.h"
#include "grammar/matcher.h"
#include "io/output_constraint.h"
#include "io/prompt_reader.h"
#include "shipped_models.h"
#include "text/tokenizer.h"

namespace tpllama {
namespace {

using Kind = OutputConstraint::Kind;

std::vector<Request> read(const std::string& content, InputFormat format = InputFormat::kJsonl,
                          RequestDefaults defaults = {}) {
  std::istringstream in(content);
  PromptReader reader(in, format, std::move(defaults), "constraints.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

Request read_one(const std::string& line, RequestDefaults defaults = {}) {
  std::vector<Request> reqs = read(line + "\n", InputFormat::kJsonl, std::move(defaults));
  EXPECT_EQ(reqs.size(), 1u);
  return reqs.empty() ? Request{} : reqs.front();
}

TEST(RequestConstraints, EachFieldReadsToItsConstraint) {
  struct Case {
    std::string fields;
    Kind kind;
    std::string text;
    std::string field;
  };
  const std::vector<Case> cases = {
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,)"
       R"( "schema": {"type": "object", "properties": {"b": {"type": "string"}}}}})",
       Kind::kJsonSchema, R"({"type":"object","properties":{"b":{"type":"string"}}})",
       "response_format.json_schema.schema"},
      {R"("response_format": {"type": "json_object"})", Kind::kJsonObject, "", "response_format"},
      {R"("guided_json": {"type": "integer"})", Kind::kJsonSchema, R"({"type":"integer"})",
       "guided_json"},
      {R"("guided_json": "{\"type\": \"integer\"}")", Kind::kJsonSchema, R"({"type":"integer"})",
       "guided_json"},
      {R"("guided_regex": "[0-9]+")", Kind::kRegex, "[0-9]+", "guided_regex"},
      {R"("guided_choice": ["yes", "no"])", Kind::kChoice, R"(["yes","no"])", "guided_choice"},
      {R"("guided_grammar": "root ::= \"a\"")", Kind::kGrammar, R"(root ::= "a")",
       "guided_grammar"},
      {R"("structured_outputs": {"json": {"type": "null"}, "disable_fallback": true})",
       Kind::kJsonSchema, R"({"type":"null"})", "structured_outputs.json"},
      {R"("structured_outputs": {"regex": "a|b"})", Kind::kRegex, "a|b",
       "structured_outputs.regex"},
      {R"("structured_outputs": {"choice": ["x"], "json_object": false})", Kind::kChoice,
       R"(["x"])", "structured_outputs.choice"},
      {R"("structured_outputs": {"grammar": "root ::= [a-z]+"})", Kind::kGrammar, "root ::= [a-z]+",
       "structured_outputs.grammar"},
      {R"("structured_outputs": {"json_object": true})", Kind::kJsonObject, "",
       "structured_outputs.json_object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    const Request r = read_one(R"({"prompt": "p", )" + c.fields + "}");
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_TRUE(r.constraint.has_value());
    EXPECT_EQ(r.constraint->kind, c.kind);
    EXPECT_EQ(r.constraint->text, c.text);
    EXPECT_EQ(r.constraint->field, c.field);
  }
}

TEST(RequestConstraints, ASchemaKeepsItsPropertiesInTheirGivenOrder) {
  // The output's keys come in the schema's order, so the schema is read with its keys in order.
  const Request r = read_one(
      R"({"messages": [{"role": "user", "content": "x"}], "guided_json": {"properties": )"
      R"({"zeta": {"type": "integer"}, "alpha": {"type": "integer"}}, "type": "object"}})");
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_TRUE(r.constraint.has_value());
  EXPECT_EQ(
      r.constraint->text,
      R"({"properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},"type":"object"})");
}

TEST(RequestConstraints, BatchBodiesTakeThemToo) {
  const std::vector<Request> reqs =
      read(R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": )"
           R"({"messages": [{"role": "user", "content": "Hi"}], "response_format": {"type": )"
           R"("json_schema", "json_schema": {"name": "x", "schema": {"enum": ["b", "a"]}}}}})"
           "\n"
           R"({"custom_id": "d", "method": "POST", "url": "/v1/completions", "body": )"
           R"({"prompt": "p", "guided_choice": ["a"], "guided_regex": "a"}})"
           "\n",
           InputFormat::kOpenAiBatch);
  ASSERT_EQ(reqs.size(), 2u);
  ASSERT_TRUE(reqs[0].error.empty()) << reqs[0].error;
  ASSERT_TRUE(reqs[0].constraint.has_value());
  EXPECT_EQ(reqs[0].constraint->text, R"({"enum":["b","a"]})");
  EXPECT_EQ(reqs[0].constraint->field, "body.response_format.json_schema.schema");
  EXPECT_EQ(reqs[1].error,
            "line 2: fields 'body.guided_regex' and 'body.guided_choice' are both given: a request "
            "takes one constraint");
}

TEST(RequestConstraints, TheDefaultAppliesUnlessARequestSaysOtherwise) {
  RequestDefaults defaults;
  defaults.constraint = OutputConstraint{Kind::kRegex, "[a-z]+", "--response-format"};
  const std::vector<Request> reqs = read(R"({"prompt": [3, 4]})"
                                         "\n"
                                         R"({"prompt": "p"})"
                                         "\n"
                                         R"({"prompt": "p", "response_format": {"type": "text"}})"
                                         "\n"
                                         R"({"prompt": "p", "guided_choice": ["x", "y"]})"
                                         "\n"
                                         R"({"context": "a", "continuation": "b"})"
                                         "\n",
                                         InputFormat::kJsonl, defaults);
  ASSERT_EQ(reqs.size(), 5u);
  for (const Request& r : reqs) ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(reqs[0].constraint, defaults.constraint) << "a prompt of token ids too";
  EXPECT_EQ(reqs[1].constraint, defaults.constraint);
  EXPECT_FALSE(reqs[2].constraint.has_value()) << "{\"type\": \"text\"} lifts the default";
  ASSERT_TRUE(reqs[3].constraint.has_value());
  EXPECT_EQ(reqs[3].constraint->kind, Kind::kChoice);
  EXPECT_FALSE(reqs[4].constraint.has_value()) << "a score is never constrained";

  std::istringstream text("one prompt\n");
  PromptReader plain(text, InputFormat::kText, defaults, "prompts.txt");
  std::optional<Request> r = plain.next(true);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->constraint, defaults.constraint) << "plain-text prompts take the default too";
}

// "0", "1", ... as the items of a JSON list.
std::string numbered_choices(int n) {
  std::string list;
  for (int i = 0; i < n; ++i) list += (i > 0 ? ", \"" : "\"") + std::to_string(i) + "\"";
  return list;
}

// vLLM's disable_any_whitespace and --json-max-digits reach the constraint, and its grammar: no
// whitespace between JSON tokens; no more digits than asked for where the schema sets no bound.
TEST(RequestConstraints, WhitespaceAndDigitsReachTheGrammar) {
  RequestDefaults defaults;
  defaults.json_max_digits = 3;
  defaults.constraint = OutputConstraint{Kind::kJsonObject, "", "--response-format"};
  const std::vector<Request> reqs =
      read(R"({"prompt": "p", "structured_outputs": {"json": {"type": "object", "properties": )"
           R"({"a": {"type": "number"}}, "required": ["a"]}, "disable_any_whitespace": true}})"
           "\n"
           R"({"prompt": "p", "guided_json": {"type": "integer"}})"
           "\n"
           R"({"prompt": "p"})"
           "\n",
           InputFormat::kJsonl, defaults);
  ASSERT_EQ(reqs.size(), 3u);
  for (const Request& r : reqs) {
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_TRUE(r.constraint.has_value());
    EXPECT_EQ(r.constraint->max_digits, 3);
  }
  EXPECT_TRUE(reqs[0].constraint->compact);
  EXPECT_FALSE(reqs[1].constraint->compact) << "whitespace is allowed unless turned off";
  const auto matches = [](const OutputConstraint& c, const std::string& text) {
    const grammar::Grammar g = compile_constraint(c);
    grammar::Matcher m(g);
    return m.advance(text) && m.can_end();
  };
  EXPECT_TRUE(matches(*reqs[0].constraint, R"({"a":-12.5})"));
  EXPECT_FALSE(matches(*reqs[0].constraint, R"({"a": -12.5})"));
  EXPECT_FALSE(matches(*reqs[0].constraint, R"({ "a":1})"));
  EXPECT_FALSE(matches(*reqs[0].constraint, R"({"a":1.2345})")) << "4 fraction digits";
  EXPECT_TRUE(matches(*reqs[1].constraint, "-999"));
  EXPECT_FALSE(matches(*reqs[1].constraint, "1000")) << "4 digits";
  EXPECT_TRUE(matches(*reqs[2].constraint, R"({"k": 1})"));
}

TEST(RequestConstraints, MalformedOrUnsupportedOnesAreErrorRecordsNamingTheField) {
  const std::string big(kMaxConstraintBytes + 1, 'a');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("guided_regex": 5)", "line 1: field 'guided_regex' must be a string, got 5"},
      {R"("guided_regex": "")",
       "line 1: field 'guided_regex' is empty: it would allow only an empty completion"},
      {R"("guided_choice": [])",
       "line 1: field 'guided_choice' must be a non-empty list of strings, got []"},
      {R"("guided_choice": ["a", 1])", "line 1: field 'guided_choice[1]' must be a string, got 1"},
      {R"("guided_json": [1])",
       "line 1: field 'guided_json' must be a JSON schema (an object), got [1]"},
      {R"("guided_json": "{nope")", "line 1: field 'guided_json' is a string but not JSON: "},
      {R"("response_format": "json")",
       R"(line 1: field 'response_format' must be an object with a 'type', got "json")"},
      {R"("response_format": {"type": "json_schema"})",
       "line 1: field 'response_format.json_schema' must be an object with a 'schema', got "
       "nothing"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})",
       "line 1: field 'response_format.json_schema.schema' is missing"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "x": 1}})",
       "line 1: field 'response_format.json_schema.x' is not read"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}})",
       "line 1: field 'response_format.json_schema.strict' must be true or false, got 1"},
      {R"("structured_outputs": {"regex": "a", "choice": ["a"]})",
       "line 1: fields 'structured_outputs.regex' and 'structured_outputs.choice' are both "
       "given: a request takes one constraint"},
      {R"("structured_outputs": {})",
       "line 1: field 'structured_outputs' gives no constraint: it needs one of json, regex, "
       "choice, grammar or json_object"},
      {R"("structured_outputs": {"regex": "a", "whitespace_pattern": " "})",
       R"(line 1: field 'structured_outputs.whitespace_pattern' is " ": tpllama does not )"
       "support it (only null)"},
      {R"("structured_outputs": {"regex": "a", "disable_any_whitespace": "yes"})",
       R"(line 1: field 'structured_outputs.disable_any_whitespace' must be true or false, got )"
       R"("yes")"},
      {R"("structured_outputs": {"regex": "a", "lark": "x"})",
       "line 1: field 'structured_outputs.lark' is not read: tpllama does not support it"},
      {R"("guided_json": {}, "response_format": {"type": "json_object"})",
       "line 1: fields 'response_format' and 'guided_json' are both given: a request takes one "
       "constraint"},
      {R"("guided_regex": ")" + big + "\"",
       "line 1: field 'guided_regex' is 1048577 bytes; a constraint may have at most 1048576 (1 "
       "MiB)"},
      {R"("guided_choice": [)" + numbered_choices(4097) + "]",
       "line 1: field 'guided_choice' has 4097 choices; at most 4096"},
      {R"("guided_whitespace_pattern": " ")",
       R"(line 1: field 'guided_whitespace_pattern' is " ": tpllama does not support it (only )"
       "null, which has no effect)"},
  };
  for (const auto& [fields, error] : cases) {
    SCOPED_TRACE(fields.substr(0, 200));
    const Request r = read_one(R"({"prompt": "p", )" + fields + "}");
    EXPECT_EQ(r.error.substr(0, error.size()), error);
    EXPECT_FALSE(r.line_failed) << "a request refused for its fields";
  }
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ResponseFormatFile, TakesOpenAisAndVllmsFormsAndNamesTheFileWhenWrong) {
  std::optional<OutputConstraint> c = read_response_format_file(write_temp(
      "rf_openai.json",
      "{\n  \"type\": \"json_schema\",\n  \"json_schema\": {\"name\": \"x\", \"schema\": "
      "{\"type\": \"object\", \"properties\": {\"z\": {}, \"a\": {}}}}\n}\n"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind, Kind::kJsonSchema);
  EXPECT_EQ(c->text, R"({"type":"object","properties":{"z":{},"a":{}}})");

  c = read_response_format_file(write_temp("rf_vllm.json", R"({"choice": ["a", "b"]})"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind, Kind::kChoice);
  EXPECT_FALSE(
      read_response_format_file(write_temp("rf_text.json", R"({"type": "text"})")).has_value());

  const std::string bad = write_temp("rf_bad.json", R"({"regex": 5})");
  try {
    read_response_format_file(bad);
    FAIL() << "a regex that is no string was taken";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--response-format " + bad +
                                         ": field 'structured_outputs.regex' must be a string, "
                                         "got 5");
  }
  EXPECT_THROW(read_response_format_file(write_temp("rf_json.json", "{")), Error);
  EXPECT_THROW(read_response_format_file(testing::TempDir() + "/no_such_file.json"), Error);
}

class ConstrainedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (shipped::stories_dir().empty()) GTEST_SKIP() << shipped::kStoriesMissing;
    tok_ = std::make_unique<Tokenizer>(shipped::stories_dir() + "/tok512.model");
    grammars_ = std::make_unique<OutputGrammars>(*tok_, tok_->vocab_size());
    out_ = std::make_unique<testing_util::OutputSide>(rules_, tok_.get(), tok_->vocab_size());
  }

  // The token whose bytes are exactly `bytes`.
  int token(const std::string& bytes) const {
    for (int id = 0; id < tok_->vocab_size(); ++id)
      if (!tok_->is_control(id) && tok_->token_bytes(id) == bytes) return id;
    ADD_FAILURE() << "no token of bytes '" << bytes << "'";
    return 0;
  }

  // A sequence constrained by c, its prompt computed, as the intake and a first step leave it.
  std::unique_ptr<Sequence> sequence(const OutputConstraint& c, int max_tokens = 50,
                                     std::vector<int32_t> stop_token_ids = {}, int n = 1) {
    Request r;
    r.prompt = "x";
    r.max_tokens = max_tokens;
    r.constraint = c;
    r.n = n;
    r.stop_token_ids = std::move(stop_token_ids);
    auto s = testing_util::make_sequence(r, {1, 5});
    EXPECT_EQ(out_->structured.constrain(*s, c), "");
    out_->open(*s);
    s->assign_slot(0);
    s->start_step(2);
    s->end_step();
    return s;
  }
  void take(Sequence& s, int token) { out_->take(s, token); }
  bool finished(const Sequence& s) const { return s.state() == SequenceState::kFinished; }

  // The mask of the sequence's next row.
  TokenMasks mask(const Sequence& s, const StructuredOutputs* structured = nullptr) const {
    TokenMasks m;
    (structured ? *structured : out_->structured).append_mask(s, 0, &m);
    return m;
  }
  static bool allowed(const TokenMasks& m, int token) {
    return (m.words[static_cast<size_t>(token) >> 5] >> (token & 31)) & 1;
  }

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<OutputGrammars> grammars_;
  StopRules rules_{{2}, 10000};  // stories260K's EOS is 2
  std::unique_ptr<testing_util::OutputSide> out_;
};

TEST_F(ConstrainedTest, StopIsAllowedOnlyWhereTheGrammarMayEnd) {
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "ab+", "guided_regex"});
  TokenMasks m = mask(*s);
  EXPECT_EQ(m.rows, std::vector<int32_t>{0});
  EXPECT_EQ(static_cast<size_t>(m.width), (static_cast<size_t>(tok_->vocab_size()) + 31) / 32);
  EXPECT_TRUE(allowed(m, token("a")));
  EXPECT_FALSE(allowed(m, token("b")));
  EXPECT_FALSE(allowed(m, 2)) << "no stop before the grammar may end";

  take(*s, token("a"));
  m = mask(*s);
  EXPECT_TRUE(allowed(m, token("b")));
  EXPECT_FALSE(allowed(m, token("a")));
  EXPECT_FALSE(allowed(m, 2));

  take(*s, token("b"));
  m = mask(*s);
  EXPECT_TRUE(allowed(m, token("b")));
  EXPECT_TRUE(allowed(m, 2)) << "\"ab\" is a whole match: it may stop";
  EXPECT_FALSE(allowed(m, 1)) << "BOS has no bytes and is no stop id";

  take(*s, 2);
  ASSERT_TRUE(finished(*s));
  const Result r = out_->record(*s);
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.finish_reason, "stop");
}

TEST_F(ConstrainedTest, AGrammarThatCanTakeNoMoreFinishesWithStop) {
  std::unique_ptr<Sequence> s = sequence({Kind::kChoice, R"(["ab","b"])", "guided_choice"});
  TokenMasks m = mask(*s);
  EXPECT_TRUE(allowed(m, token("a")));
  EXPECT_TRUE(allowed(m, token("b")));
  EXPECT_FALSE(allowed(m, token("c")));
  take(*s, token("b"));
  ASSERT_TRUE(finished(*s)) << "\"b\" is a whole choice and nothing may follow it";
  const Result r = out_->record(*s);
  EXPECT_EQ(r.text, "b");
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.completion_tokens, 1) << "no stop token was needed";
}

TEST_F(ConstrainedTest, MaxTokensCutsItWithLength) {
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "a{5}", "guided_regex"}, 3);
  for (int i = 0; i < 3; ++i) take(*s, token("a"));
  ASSERT_TRUE(finished(*s));
  const Result r = out_->record(*s);
  EXPECT_EQ(r.text, "aaa");
  EXPECT_EQ(r.finish_reason, "length") << "cut short of the grammar's end: never \"stop\"";
}

TEST_F(ConstrainedTest, ATokenTheGrammarRefusesIsAnErrorRecord) {
  // The head never samples one (the mask), so this guards the engine's own consistency.
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "a+", "guided_regex"});
  take(*s, token("b"));
  ASSERT_TRUE(finished(*s));
  const Result r = out_->record(*s);
  EXPECT_EQ(r.finish_reason, "error");
  EXPECT_NE(r.error.find("is not one its grammar allows"), std::string::npos) << r.error;
}

TEST_F(ConstrainedTest, GrammarsAreCompiledOncePerTextAndRefusalsRemembered) {
  const OutputConstraint a{Kind::kRegex, "[0-9]+", "guided_regex"};
  const auto first = grammars_->compile(a);
  const auto again = grammars_->compile({Kind::kRegex, "[0-9]+", "structured_outputs.regex"});
  EXPECT_EQ(first.get(), again.get()) << "the same text is the same grammar";
  EXPECT_NE(grammars_->compile({Kind::kGrammar, "root ::= [0-9]+", "g"}).get(), first.get())
      << "another kind is another grammar";
  EXPECT_EQ(grammars_->compiled(), 2u);

  const OutputConstraint bad{Kind::kRegex, "(a", "guided_regex"};
  std::string message;
  try {
    grammars_->compile(bad);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_FALSE(message.empty());
  try {
    grammars_->compile(bad);
    FAIL() << "a refused pattern was taken the second time";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  EXPECT_EQ(grammars_->compiled(), 3u) << "the refusal is remembered, not compiled again";
}

TEST_F(ConstrainedTest, MasksOfAStateAreMemoized) {
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "[a-z]+", "guided_regex"});
  const TokenMasks first = mask(*s);
  for (int i = 0; i < 5; ++i) take(*s, token("a"));
  const MaskStats stats = out_->structured.figures().masks;
  EXPECT_EQ(stats.time.count(), 6) << "one at the start, one after each token";
  EXPECT_EQ(stats.computed, 2) << "the start, then one state for every letter after it";
}

TEST_F(ConstrainedTest, ASampleForkedFromItStartsAtTheGrammarsStart) {
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "ab", "guided_regex"}, 10, {}, /*n=*/2);
  take(*s, token("a"));
  std::unique_ptr<Sequence> child = s->fork(1);
  out_->structured.fork(*s, *child);
  const TokenMasks m = mask(*child);
  EXPECT_TRUE(allowed(m, token("a")));
  EXPECT_FALSE(allowed(m, token("b")));
  EXPECT_TRUE(allowed(mask(*s), token("b")));
}

// Cursors are keyed by a sequence's address: a sample forked from an unconstrained sequence is
// unconstrained whatever sequence held its address before.
TEST_F(ConstrainedTest, AForkOfAnUnconstrainedSequenceHasNoGrammar) {
  std::unique_ptr<Sequence> held = sequence({Kind::kRegex, "a+", "guided_regex"});
  ASSERT_TRUE(out_->structured.constrained(*held));
  Request r;
  r.prompt = "x";
  const auto parent = testing_util::make_sequence(r, {1, 5});
  out_->structured.fork(*parent, *held);  // as if a fork took the freed address
  EXPECT_FALSE(out_->structured.constrained(*held));
}

TEST_F(ConstrainedTest, AStopTokenIdThatIsTextIsAllowedOnlyWhereTheGrammarMayEnd) {
  // vLLM's stop_token_ids may name a text token; inside the grammar it would cut the text short.
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "[ab]c", "guided_regex"}, 50, {token("a")});
  TokenMasks m = mask(*s);
  EXPECT_FALSE(allowed(m, token("a"))) << "a stop id where the grammar cannot end";
  EXPECT_TRUE(allowed(m, token("b")));
  take(*s, token("b"));
  take(*s, token("c"));
  ASSERT_TRUE(finished(*s));
  EXPECT_EQ(out_->record(*s).text, "bc");

  s = sequence({Kind::kRegex, "a[ab]*", "guided_regex"}, 50, {token("b")});
  take(*s, token("a"));
  m = mask(*s);
  EXPECT_TRUE(allowed(m, token("b"))) << "where it may end, the stop id is allowed (as a stop)";
  take(*s, token("b"));
  ASSERT_TRUE(finished(*s));
  const Result r = out_->record(*s);
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.stop_reason, token("b"));
}

TEST_F(ConstrainedTest, AGrammarOfOnlyTheEmptyTextIsRefused) {
  Request r;
  r.prompt = "x";
  auto s = testing_util::make_sequence(r, {1, 5});
  EXPECT_EQ(out_->structured.constrain(*s, {Kind::kRegex, "a{0}", "guided_regex"}),
            "field 'guided_regex' (regex): the grammar matches only an empty completion");
  EXPECT_FALSE(out_->structured.constrained(*s));
}

TEST_F(ConstrainedTest, MasksCoverAModelVocabularyLargerThanItsTokenizers) {
  // Padded vocabularies (the embedding rounded up past the tokenizer's ids): those ids have no
  // bytes, are never allowed, and the mask is as wide as the model's head.
  StructuredOutputs padded(tok_.get(), 600, rules_);
  Request r;
  r.prompt = "x";
  auto s = testing_util::make_sequence(r, {1, 5});
  ASSERT_EQ(padded.constrain(*s, {Kind::kRegex, "[a-z]+", "guided_regex"}), "");
  const TokenMasks m = mask(*s, &padded);
  EXPECT_EQ(m.width, (600 + 31) / 32);
  EXPECT_TRUE(allowed(m, token("a")));
  for (int t = tok_->vocab_size(); t < 600; ++t) ASSERT_FALSE(allowed(m, t)) << t;
}

// The first token its mask allows (the head would draw among them).
int first_allowed(const TokenMasks& m) {
  for (size_t w = 0; w < m.words.size(); ++w)
    if (m.words[w] != 0) return static_cast<int>(32 * w) + __builtin_ctz(m.words[w]);
  return -1;
}

TEST_F(ConstrainedTest, HostileConstraintsAreRefusedOrBounded) {
  // Nested past the schema depth limit, and an enum past its size limit: refused by name.
  nlohmann::json deep = {{"type", "string"}};
  for (int i = 0; i < 100; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_THROW(grammars_->compile({Kind::kJsonSchema, deep.dump(), "guided_json"}), Error);
  nlohmann::json wide = {{"enum", nlohmann::json::array()}};
  for (int i = 0; i < 5000; ++i) wide["enum"].push_back(std::to_string(i));
  EXPECT_THROW(grammars_->compile({Kind::kJsonSchema, wide.dump(), "guided_json"}), Error);

  // A pattern that backtracks catastrophically in a backtracking engine: here its parses are a
  // bounded set, and a long text is matched in linear time.
  std::unique_ptr<Sequence> s = sequence({Kind::kRegex, "(a+)+b", "guided_regex"}, 3000);
  for (int i = 0; i < 2000 && !finished(*s); ++i) take(*s, token("a"));
  ASSERT_FALSE(finished(*s));
  EXPECT_TRUE(allowed(mask(*s), token("b")));
  take(*s, token("b"));
  ASSERT_TRUE(finished(*s));
  EXPECT_EQ(out_->record(*s).finish_reason, "stop");

  // A recursive $ref without a base case has no finite text: following its masks, the request
  // runs to max_tokens and ends with "length", never "stop".
  const std::string endless =
      R"({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]})";
  s = sequence({Kind::kJsonSchema, nlohmann::ordered_json::parse(endless).dump(), "guided_json"},
               40);
  while (!finished(*s)) {
    const int t = first_allowed(mask(*s));
    ASSERT_GE(t, 0) << "the mask allows nothing after " << s->counts().generated << " tokens";
    EXPECT_NE(t, 2) << "EOS where the grammar cannot end";
    take(*s, t);
  }
  const Result r = out_->record(*s);
  EXPECT_EQ(r.finish_reason, "length") << r.text;
  EXPECT_EQ(r.completion_tokens, 40);
  EXPECT_EQ(r.text.substr(0, 1), "{") << r.text;
}

}  // namespace
}  // namespace tpllama
