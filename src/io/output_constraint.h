// Structured-output requests as the batch formats write them: OpenAI's response_format, vLLM's
// structured_outputs and its older guided_json / guided_regex / guided_choice / guided_grammar
// fields, and the --response-format file that gives every request of a job a default. Each is read
// into an OutputConstraint (io/request.h); the grammar engine compiles it at intake.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/request.h"

namespace tpllama {

// The largest constraint text (a schema as compact JSON, a pattern, a grammar, the choices): a
// larger one is refused as it is read, before anything is compiled.
inline constexpr size_t kMaxConstraintBytes = size_t{1} << 20;
// The most strings a guided_choice lists (as a schema's enum).
inline constexpr size_t kMaxChoices = 4096;

// "json_schema", "json_object", "regex", "choice", "grammar".
const char* constraint_kind_name(OutputConstraint::Kind kind);

// --response-format FILE: one JSON object, either an OpenAI response_format ({"type":
// "json_schema", "json_schema": {"name", "schema", "strict"}} or {"type": "json_object"}) or a vLLM
// structured_outputs object ({"json": schema}, {"regex": ...}, {"choice": [...]}, {"grammar": ...}
// or {"json_object": true}). nullopt for {"type": "text"}. Throws Error naming the file and the
// field at fault. The constraint's field names the file, for the records' messages.
std::optional<OutputConstraint> read_response_format_file(const std::string& path);

}  // namespace tpllama
