// JSON Schemas as grammars: over ten real-world-shaped schemas (nested objects, arrays of objects,
// enums, recursive $ref, string formats, patterns, maps), the grammar accepts a text exactly when
// python3-jsonschema validates it under the strict reading
// (tests/data/grammar/json_schema_cases.json, written by scripts/oracles/json_schema_cases.py);
// keywords it does not read are refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

namespace tpllama::grammar {
namespace {

using json = nlohmann::ordered_json;

TEST(JsonSchema, AcceptsExactlyWhatJsonschemaValidates) {
  std::ifstream in(std::string(TPLLAMA_TEST_DATA_DIR) + "/grammar/json_schema_cases.json");
  ASSERT_TRUE(in) << "tests/data/grammar/json_schema_cases.json is missing";
  const json cases = json::parse(in)["cases"];
  ASSERT_GE(cases.size(), 10u);
  for (const json& c : cases) {
    const Grammar g = compile_json_schema(c["schema"]);
    int valid = 0, invalid = 0;
    for (const json& t : c["texts"]) {
      const std::string text = t[0];
      const bool want = t[1];
      (want ? valid : invalid) += 1;
      EXPECT_EQ(full_match(g, text), want) << c["name"] << ": " << text;
    }
    EXPECT_GT(valid, 0) << c["name"];
    if (c["name"] != "anything") EXPECT_GT(invalid, 0) << c["name"];
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
          {R"({"type": "object", "patternProperties": {"^x": {}}})",
           "the keyword 'patternProperties'"},
          {R"({"type": "string", "format": "hostname"})", "the format \"hostname\""},
          {R"({"type": "integer", "minimum": 5})", "an integer minimum other than 0 or 1"},
          {R"({"type": "integer", "maximum": 5})", "the keyword 'maximum'"},
          {R"({"type": "number", "minimum": 0})", "a number's 'minimum'"},
          {R"({"allOf": [{"type": "string"}, {"minLength": 2}]})", "'allOf' of more than one"},
          {R"({"$ref": "https://example.com/s.json"})", "not a local reference"},
          {R"({"$ref": "#/$defs/missing"})", "not a local reference"},
          {R"({"type": "frog"})", "unknown type 'frog'"},
          {R"({"properties": {"a": {}}, "required": ["b"]})", "which 'properties' does not have"},
          {R"({"properties": {"a": {}}, "additionalProperties": true})", "'additionalProperties'"},
          {R"({"type": "string", "pattern": "(a)\\1"})", "the escape \\1"},
          {R"({"type": "string", "pattern": "a\"b"})", "a character a JSON string must escape"},
          {R"({"type": "array", "maxItems": 100000})",
           "'maxItems' must be an integer from 0 to 1024"},
          {R"({"enum": []})", "'enum' must be a list of 1 to 4096 values"},
          {R"(false)", "matches nothing"},
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

// Hostile schemas end in a refusal, not a hang or a crash: nesting past the limit, a recursive
// $ref with no way out (its grammar matches nothing finite, but is refused nowhere: it compiles
// and no text ends it), an enum past its limit.
TEST(JsonSchema, HostileSchemasAreBounded) {
  json deep = {{"type", "string"}};
  for (int i = 0; i < 100; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_THROW(compile_json_schema(deep), Error);
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

}  // namespace
}  // namespace tpllama::grammar
