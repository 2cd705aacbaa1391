// JSON Schemas as grammars: over ten real-world-shaped schemas (nested objects, arrays of objects,
// enums, recursive $ref, string formats, patterns, maps), the grammar accepts a text exactly when
// python3-jsonschema validates it under the strict reading
// (tests/data/grammar/json_schema_cases.json, written by scripts/oracles/json_schema_cases.py);
// keywords it does not read are refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/schema_shape.h"
#include "grammar_test_util.h"

namespace tpllama::grammar {
namespace {

using json = nlohmann::ordered_json;

TEST(JsonSchema, AcceptsExactlyWhatJsonschemaValidates) {
  std::ifstream in(std::string(TPLLAMA_TEST_DATA_DIR) + "/grammar/json_schema_cases.json");
  ASSERT_TRUE(in) << "tests/data/grammar/json_schema_cases.json is missing";
  const json cases = json::parse(in)["cases"];
  ASSERT_GE(cases.size(), 29u);
  for (const json& c : cases) {
    JsonSchemaOptions options;
    if (c.contains("options")) options.any_whitespace = c["options"].value("any_whitespace", true);
    const Grammar g = compile_json_schema(c["schema"], options);
    int valid = 0, invalid = 0;
    for (const json& t : c["texts"]) {
      const std::string text = t[0];
      const bool want = t[1];
      (want ? valid : invalid) += 1;
      EXPECT_EQ(full_match(g, text), want) << c["name"] << ": " << text;
    }
    EXPECT_GT(valid, 0) << c["name"];
    if (c["name"] != "anything") {
      EXPECT_GT(invalid, 0) << c["name"];
    }
  }
}

// RFC 3339's full-time (its section 5.8 examples), which format "time" is.
TEST(JsonSchema, TimeIsRfc3339sFullTime) {
  const Grammar g = compile_json_schema(json::parse(R"({"type": "string", "format": "time"})"));
  for (const char* ok : {R"("23:20:50.52Z")", R"("16:39:57-08:00")", R"("00:00:00+00:00")"})
    EXPECT_TRUE(full_match(g, ok)) << ok;
  for (const char* bad : {R"("23:20:50")", R"("24:00:00Z")", R"("12:60:00Z")", R"("1:00:00Z")"})
    EXPECT_FALSE(full_match(g, bad)) << bad;
}

TEST(JsonSchema, AnyObjectIsAnObjectOfAnything) {
  const Grammar g = json_object_grammar();
  EXPECT_TRUE(full_match(g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(full_match(g, "{}"));
  EXPECT_FALSE(full_match(g, "[]"));
  EXPECT_FALSE(full_match(g, R"({"a": })"));
}

TEST(JsonSchema, KeywordsItDoesNotReadAreRefusedByName) {
  expect_refused(
      {
          {R"({"type": "object", "patternProperties": {"^x": {}, "^y": {}}})",
           "more than one 'patternProperties' pattern"},
          {R"({"type": "string", "format": "hostname"})", "the format \"hostname\""},
          {R"({"type": "integer", "multipleOf": 5})", "the keyword 'multipleOf'"},
          {R"({"not": {"type": "null"}})", "the keyword 'not'"},
          {R"({"type": "number", "minimum": 1e19})", "a bound of 2^63 or more"},
          {R"({"type": "integer", "exclusiveMinimum": true})", "draft 2020-12's form"},
          {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})",
           "'oneOf' alternatives 0 and 1 may both match a string"},
          {R"({"type": "string", "pattern": "^a", "format": "date"})", "beside 'format'"},
          {R"({"type": "string", "pattern": "a+b", "maxLength": 3})", "it does not imply"},
          {R"({"type": "object", "properties": {"xa": {}}, "patternProperties": {"^x": {}},
               "additionalProperties": false, "minProperties": 2})",
           "matches the property \"xa\", and 'minProperties' needs members it names"},
          {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2})",
           "'minProperties' 2 needs two or more members"},
          {R"({"type": "array", "uniqueItems": true})", "'uniqueItems': true"},
          {R"({"$ref": "https://example.com/s.json"})", "not a local reference"},
          {R"({"$ref": "#/$defs/missing"})", "not a local reference"},
          {R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
           "refers back to itself"},
          {R"({"type": "frog"})", "unknown type 'frog'"},
          {R"({"type": "string", "pattern": "(a)\\1"})", "the escape \\1"},
          {R"({"type": "string", "pattern": "a\"b"})", "a character a JSON string must escape"},
          {R"({"type": "string", "pattern": "^a|b$"})", "an anchor beside a '|'"},
          {R"({"type": "array", "maxItems": 100000})",
           "'maxItems' must be an integer from 0 to 1024"},
          {R"({"enum": []})", "'enum' must be a list of 1 to 4096 values"},
      },
      [](const std::string& s) { compile_json_schema(json::parse(s)); });
  // A path names where: the property of the property.
  try {
    compile_json_schema(json::parse(
        R"({"properties": {"a": {"properties": {"b": {"type": "string", "format": "ipv4"}}}}})"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at #/properties/a/properties/b"), std::string::npos)
        << e.what();
  }
}

// A schema no value satisfies is refused, not compiled into a grammar that writes something else:
// every keyword beside an enum, a const or a combinator holds (the values the old reading wrote
// are in the comments).
TEST(JsonSchema, SchemasNoValueSatisfiesAreRefused) {
  std::vector<std::pair<std::string, std::string>> cases;
  for (const char* schema : {
           R"({"type": "string", "enum": [1, 2]})",   // wrote 1
           R"({"type": "boolean", "const": "yes"})",  // wrote "yes"
           R"({"const": "abc", "pattern": "^x"})",    // wrote "abc"
           R"({"type": "integer", "anyOf": [{"type": "string"}, {"type": "boolean"}]})",
           R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 3})",
           R"({"type": "integer", "minimum": 5, "maximum": 4})",
           R"({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2})",
           R"({"type": "number", "minimum": 2.5, "exclusiveMaximum": 2.5})",
           R"({"allOf": [{"type": "string"}, {"type": "number"}]})",
           R"({"type": "object", "properties": {"a": {}}, "required": ["b"],
               "additionalProperties": false})",
           R"({"type": "string", "minLength": 3, "maxLength": 2})",
           R"({"oneOf": [{"const": 1}, {"enum": [1, 2.5]}], "type": "integer"})",
           R"({"type": "object", "properties": {"a": false}, "required": ["a"]})",
           R"({"type": "object", "maxProperties": 1, "required": ["a", "b"]})",
           R"(false)",
       })
    cases.emplace_back(schema, "no value satisfies the schema");
  expect_refused(cases, [](const std::string& s) { compile_json_schema(json::parse(s)); });
}

// An email of bounded length: the format's parts bounded so their lengths add up within.
TEST(JsonSchema, AnEmailWithinLengthsIsAnEmailOfThoseLengths) {
  const Grammar g = compile_json_schema(
      json::parse(R"({"type": "string", "format": "email", "minLength": 8, "maxLength": 12})"));
  EXPECT_TRUE(full_match(g, R"("abc@d.org")"));
  EXPECT_TRUE(full_match(g, R"("abcde@fg.com")"));
  EXPECT_FALSE(full_match(g, R"("a@b.cc")")) << "6 characters";
  EXPECT_FALSE(full_match(g, R"("abcdef@ghijk.org")")) << "16 characters";
  EXPECT_FALSE(full_match(g, R"("abcdefgh")")) << "no email";
  EXPECT_THROW(
      compile_json_schema(json::parse(R"({"type": "string", "format": "email", "maxLength": 5})")),
      Error)
      << "no email of the format's form has 5 characters";
}

// Hostile schemas end in a refusal, not a hang or a crash: nesting past the limit, a recursive
// $ref with no way out (its grammar matches nothing finite, but is refused nowhere: it compiles
// and no text ends it), an enum past its limit.
TEST(JsonSchema, HostileSchemasAreBounded) {
  json deep = {{"type", "string"}};
  for (int i = 0; i < 100; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_THROW(compile_json_schema(deep), Error);
  json product = {{"allOf", json::array()}};
  for (int i = 0; i < 5; ++i) {
    json any = json::array();
    for (int k = 0; k < 5; ++k) any.push_back({{"type", "string"}, {"minLength", i * 5 + k}});
    product["allOf"].push_back({{"anyOf", any}});
  }
  EXPECT_THROW(compile_json_schema(product), Error) << "5^5 alternatives";
  json wide = {{"enum", json::array()}};
  for (int i = 0; i < 5000; ++i) wide["enum"].push_back(i);
  EXPECT_THROW(compile_json_schema(wide), Error);
  const Grammar loop = compile_json_schema(json::parse(
      R"({"$defs": {"a": {"type": "object", "properties": {"next": {"$ref": "#/$defs/a"}},
          "required": ["next"]}}, "$ref": "#/$defs/a"})"));
  Matcher m(loop);
  EXPECT_TRUE(m.advance(R"({"next":{"next":{"next":)"));
  EXPECT_FALSE(m.can_end());
}

// src/README.md's list of the keywords read is the reader's own list, in its order.
TEST(JsonSchema, TheReadmeListsTheKeywordsTheReaderTakes) {
  std::ifstream in(TPLLAMA_SOURCE_DIR "/src/README.md");
  ASSERT_TRUE(in.good()) << "cannot read src/README.md";
  std::string line, listed;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find("<!-- schema-keywords: end") != std::string::npos) break;
    if (inside) listed += line;
    if (line.find("<!-- schema-keywords: begin") != std::string::npos) inside = true;
  }
  std::string expected;
  for (const std::string& k : supported_schema_keywords())
    expected += (expected.empty() ? "`" : ", `") + k + "`";
  const size_t first = listed.find_first_not_of(' ');
  EXPECT_EQ(first == std::string::npos ? "" : listed.substr(first), expected)
      << "src/README.md's schema-keywords list differs from grammar/schema_shape.cpp's";
}

}  // namespace
}  // namespace tpllama::grammar
