// JSON Schema as a byte grammar: the texts it matches are JSON values the schema validates.
//
// Every keyword of a schema holds at once (schema_shape.h reads them): type (one or a list);
// enum and const (filtered by their sibling keywords); allOf, anyOf and $ref (a local JSON pointer,
// recursion included); oneOf where its alternatives can be shown to exclude each other (distinct
// types, values, ranges, lengths or required properties; a number beside an integer keeps the
// numbers with a fraction), refused by name elsewhere; minimum, maximum, exclusiveMinimum and
// exclusiveMaximum on integers and numbers (any bounds, as digit automata); minLength, maxLength,
// pattern (a regex, regex.h, searched for as ECMA-262 does) and format (date, time, date-time,
// uuid, email), a pattern or format beside lengths where it implies them or is one quantified
// character class; items, prefixItems, minItems, maxItems, uniqueItems false; properties,
// required, additionalProperties (false, a schema, or absent: JSON Schema allows other members, the
// grammar writes none beside properties, as OpenAI's strict mode and XGrammar do), one
// patternProperties pattern, propertyNames, minProperties and maxProperties; $defs and definitions;
// and the annotations title, description, examples, default, $schema, $id, $comment, deprecated,
// readOnly, writeOnly. Any other keyword, or a value of the wrong kind, is refused by name, never
// ignored; so is a schema no value satisfies.
//
// Numbers are written without an exponent; an unbounded side has at most `digits.integer` digits
// and a fraction at most `digits.fraction` (15: what a double holds exactly), so a model cannot
// write digits without end. The value has no whitespace before or after it; between its tokens the
// grammar allows nothing, a space, or a newline and up to 20 spaces or tabs (pretty-printed output,
// no runs of blank lines), or nothing at all where `any_whitespace` is off (vLLM's
// disable_any_whitespace).
#pragma once

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/number_range.h"
#include "grammar/schema_shape.h"

namespace tpllama::grammar {

struct JsonSchemaOptions {
  ShapeLimits shape;
  GrammarLimits grammar;
  DigitLimits digits;
  bool any_whitespace = true;
};

// Throws Error naming the keyword and its place ("at #/properties/name") when refused.
// The schema is read with its keys in order (the properties' order is the texts').
Grammar compile_json_schema(const nlohmann::ordered_json& schema,
                            const JsonSchemaOptions& options = {});

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
Grammar json_object_grammar(const JsonSchemaOptions& options = {});

}  // namespace tpllama::grammar
