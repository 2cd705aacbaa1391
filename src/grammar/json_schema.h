// JSON Schema as a byte grammar: the texts it matches are JSON values the schema validates.
//
// Keywords: type (one or a list), properties with required (the properties come in the schema's
// order, the required ones always, the others optionally), additionalProperties (false, or absent,
// which here means false as in OpenAI's strict structured outputs and XGrammar's strict mode; a
// schema, for an object without properties: a map), enum, const, anyOf, oneOf (as anyOf: its
// branches should exclude each other), items, prefixItems, minItems, maxItems, minLength,
// maxLength, pattern (a regex, regex.h, over the decoded string, which it may not need to escape),
// format (date, time, date-time, uuid, email), $ref to "#", "#/$defs/..." or "#/definitions/..."
// (recursion included), and the annotations title, description, examples, default, $schema, $id,
// $comment. Any other keyword, or a value of the wrong kind, is refused by name, never ignored.
// The value has no whitespace before or after it; between its tokens the grammar allows nothing, a
// space, or a newline and up to 20 spaces or tabs (pretty-printed output, no runs of blank lines).
#pragma once

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace tpllama::grammar {

struct JsonSchemaLimits {
  int max_depth = 64;      // nested schemas (through $ref, once each)
  size_t max_enum = 4096;  // values of one enum
  int max_items = 1024;    // the largest minItems / maxItems / minLength / maxLength read
  GrammarLimits grammar;
};

// Throws Error naming the keyword and its place ("at #/properties/name") when refused.
// The schema is read with its keys in order (the properties' order is the texts').
Grammar compile_json_schema(const nlohmann::ordered_json& schema,
                            const JsonSchemaLimits& limits = {});

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
Grammar json_object_grammar();

}  // namespace tpllama::grammar
