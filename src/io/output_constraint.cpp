// Reading a request's structured-output fields into an OutputConstraint. A request takes one
// constraint; the fields that give one are all refused together, naming both, as are a kind this
// engine has not got (OpenAI's structural tags) and every key it does not read.
#include "io/output_constraint.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "io/request_fields.h"

namespace tpllama {

using nlohmann::json;
using nlohmann::ordered_json;
using request_fields::FieldSite;
using request_fields::reject;

const char* constraint_kind_name(OutputConstraint::Kind kind) {
  switch (kind) {
    case OutputConstraint::Kind::kJsonSchema:
      return "json_schema";
    case OutputConstraint::Kind::kJsonObject:
      return "json_object";
    case OutputConstraint::Kind::kRegex:
      return "regex";
    case OutputConstraint::Kind::kChoice:
      return "choice";
    case OutputConstraint::Kind::kGrammar:
      return "grammar";
  }
  return "?";
}

namespace {

std::string shown(const ordered_json& v) {
  return describe_json(json(v));
}

const ordered_json* find(const ordered_json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

OutputConstraint make(OutputConstraint::Kind kind, std::string text, const std::string& field,
                      const FieldSite& at) {
  if (text.size() > kMaxConstraintBytes)
    reject(at, "field '", field, "' is ", text.size(), " bytes; a constraint may have at most ",
           kMaxConstraintBytes, " (1 MiB)");
  return {kind, std::move(text), field};
}

// A JSON schema: an object, or (vLLM's guided_json takes both) a string holding one.
OutputConstraint schema_constraint(const ordered_json& v, const std::string& field,
                                   const FieldSite& at) {
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    if (text.size() > kMaxConstraintBytes)
      reject(at, "field '", field, "' is ", text.size(), " bytes; a constraint may have at most ",
             kMaxConstraintBytes, " (1 MiB)");
    if (std::optional<std::string> deep = json_depth_error(text))
      reject(at, "field '", field, "' is not read: ", *deep);
    ordered_json parsed;
    try {
      parsed = ordered_json::parse(text);
    } catch (const json::exception& e) {
      reject(at, "field '", field,
             "' is a string but not JSON: ", request_fields::parser_message(e));
    }
    return schema_constraint(parsed, field, at);
  }
  if (!v.is_object())
    reject(at, "field '", field, "' must be a JSON schema (an object), got ", shown(v));
  return make(OutputConstraint::Kind::kJsonSchema, v.dump(), field, at);
}

OutputConstraint string_constraint(OutputConstraint::Kind kind, const ordered_json& v,
                                   const std::string& field, const FieldSite& at) {
  if (!v.is_string()) reject(at, "field '", field, "' must be a string, got ", shown(v));
  if (v.get_ref<const std::string&>().empty())
    reject(at, "field '", field, "' is empty: it would allow only an empty completion");
  return make(kind, v.get<std::string>(), field, at);
}

OutputConstraint choice_constraint(const ordered_json& v, const std::string& field,
                                   const FieldSite& at) {
  if (!v.is_array() || v.empty())
    reject(at, "field '", field, "' must be a non-empty list of strings, got ", shown(v));
  if (v.size() > kMaxChoices)
    reject(at, "field '", field, "' has ", v.size(), " choices; at most ", kMaxChoices);
  for (size_t i = 0; i < v.size(); ++i)
    if (!v[i].is_string())
      reject(at, "field '", field, "[", i, "]' must be a string, got ", shown(v[i]));
  return make(OutputConstraint::Kind::kChoice, v.dump(), field, at);
}

// Every key of `object` is one of `known`, else the first other is refused by name.
template <size_t N>
void only_keys(const ordered_json& object, const char* const (&known)[N], const std::string& field,
               const FieldSite& at, const char* why) {
  for (auto it = object.begin(); it != object.end(); ++it)
    if (std::find(std::begin(known), std::end(known), it.key()) == std::end(known))
      reject(at, "field '", field, ".", it.key(), "' is not read", why);
}

// OpenAI's response_format; nullopt for {"type": "text"}.
std::optional<OutputConstraint> response_format(const ordered_json& v, const std::string& field,
                                                const FieldSite& at) {
  if (!v.is_object())
    reject(at, "field '", field, "' must be an object with a 'type', got ", shown(v));
  const ordered_json* type = find(v, "type");
  if (type == nullptr || !type->is_string())
    reject(at, "field '", field,
           ".type' must be \"text\", \"json_object\" or \"json_schema\", got ",
           type ? shown(*type) : std::string("nothing"));
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text" || name == "json_object") {
    static constexpr const char* kKeys[] = {"type"};
    only_keys(v, kKeys, field, at,
              name == "json_object"
                  ? ": a schema goes in {\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
                    "...}}"
                  : " with type \"text\"");
    if (name == "text") return std::nullopt;
    return OutputConstraint{OutputConstraint::Kind::kJsonObject, "", field};
  }
  if (name != "json_schema")
    reject(at, "field '", field, ".type' is ", shown(*type),
           ": tpllama takes \"text\", \"json_object\" and \"json_schema\" (for a regex, choice or "
           "grammar use vLLM's 'structured_outputs')");
  static constexpr const char* kKeys[] = {"type", "json_schema"};
  only_keys(v, kKeys, field, at, "");
  const std::string inner = field + ".json_schema";
  const ordered_json* spec = find(v, "json_schema");
  if (spec == nullptr || !spec->is_object())
    reject(at, "field '", inner, "' must be an object with a 'schema', got ",
           spec ? shown(*spec) : std::string("nothing"));
  // strict: OpenAI's strict mode is how tpllama always decodes (the output always validates, and
  // an object has no properties its schema does not list), so either value is taken.
  static constexpr const char* kSpecKeys[] = {"name", "schema", "strict", "description"};
  only_keys(*spec, kSpecKeys, inner, at, "");
  for (const char* key : {"name", "description"})
    if (const ordered_json* s = find(*spec, key); s && !s->is_string())
      reject(at, "field '", inner, ".", key, "' must be a string, got ", shown(*s));
  if (const ordered_json* s = find(*spec, "strict"); s && !s->is_boolean())
    reject(at, "field '", inner, ".strict' must be true or false, got ", shown(*s));
  const ordered_json* schema = find(*spec, "schema");
  if (schema == nullptr) reject(at, "field '", inner, ".schema' is missing");
  return schema_constraint(*schema, inner + ".schema", at);
}

// vLLM's structured_outputs (StructuredOutputsParams): one of json, regex, choice, grammar,
// json_object.
OutputConstraint structured_outputs(const ordered_json& v, const std::string& field,
                                    const FieldSite& at) {
  if (!v.is_object())
    reject(at, "field '", field, "' must be an object (json, regex, choice, grammar or ",
           "json_object), got ", shown(v));
  // disable_fallback picks among vLLM's backends (tpllama has one); disable_additional_properties:
  // tpllama never writes a property a schema does not list, either way.
  static constexpr const char* kKeys[] = {"json",
                                          "regex",
                                          "choice",
                                          "grammar",
                                          "json_object",
                                          "disable_fallback",
                                          "disable_additional_properties",
                                          "disable_any_whitespace",
                                          "whitespace_pattern",
                                          "structural_tag"};
  only_keys(v, kKeys, field, at, ": tpllama does not support it");
  for (const char* key : {"whitespace_pattern", "structural_tag"})
    if (find(v, key))
      reject(at, "field '", field, ".", key, "' is ", shown(v[key]),
             ": tpllama does not support it (only null)");
  for (const char* key :
       {"disable_fallback", "disable_additional_properties", "disable_any_whitespace"})
    if (const ordered_json* b = find(v, key); b && !b->is_boolean())
      reject(at, "field '", field, ".", key, "' must be true or false, got ", shown(*b));
  std::optional<OutputConstraint> found;
  const char* found_key = nullptr;
  for (const char* key : {"json", "regex", "choice", "grammar", "json_object"}) {
    const ordered_json* given = find(v, key);
    if (given == nullptr) continue;
    const std::string name = field + "." + key;
    if (std::string_view(key) == "json_object") {
      if (!given->is_boolean())
        reject(at, "field '", name, "' must be true or false, got ", shown(*given));
      if (!given->get<bool>()) continue;
    }
    if (found)
      reject(at, "fields '", field, ".", found_key, "' and '", name,
             "' are both given: a request takes one constraint");
    found_key = key;
    const std::string k = key;
    if (k == "json") found = schema_constraint(*given, name, at);
    if (k == "regex") found = string_constraint(OutputConstraint::Kind::kRegex, *given, name, at);
    if (k == "choice") found = choice_constraint(*given, name, at);
    if (k == "grammar")
      found = string_constraint(OutputConstraint::Kind::kGrammar, *given, name, at);
    if (k == "json_object") found = OutputConstraint{OutputConstraint::Kind::kJsonObject, "", name};
  }
  if (!found)
    reject(at, "field '", field, "' gives no constraint: it needs one of json, regex, choice, ",
           "grammar or json_object");
  // JSON with no whitespace between its tokens (a regex, choice or grammar says its own spaces).
  if (const ordered_json* d = find(v, "disable_any_whitespace")) found->compact = d->get<bool>();
  return std::move(*found);
}

}  // namespace

namespace request_fields {

void parse_output_constraint(const FieldInput& in, Request& req) {
  const std::span<const char* const> fields = constraint_fields();
  // The fields are read again in their given order only when the request gives one.
  if (std::none_of(fields.begin(), fields.end(),
                   [&](const char* key) { return find_field(in.object(), key) != nullptr; }))
    return;
  const ordered_json& object = in.ordered();
  const FieldSite& at = in.at();
  const char* given = nullptr;  // the field that gave the request's constraint, once one has
  for (const char* key : fields) {
    const ordered_json* v = find(object, key);
    if (v == nullptr) continue;
    if (given != nullptr)
      reject(at, "fields '", at.name(given), "' and '", at.name(key),
             "' are both given: a request takes one constraint");
    given = key;
    const std::string field = at.name(key);
    const std::string k = key;
    if (k == "response_format") {
      req.constraint = response_format(*v, field, at);  // {"type": "text"}: none, not the default
    } else if (k == "structured_outputs") {
      req.constraint = structured_outputs(*v, field, at);
    } else if (k == "guided_json") {
      req.constraint = schema_constraint(*v, field, at);
    } else if (k == "guided_regex") {
      req.constraint = string_constraint(OutputConstraint::Kind::kRegex, *v, field, at);
    } else if (k == "guided_choice") {
      req.constraint = choice_constraint(*v, field, at);
    } else {
      req.constraint = string_constraint(OutputConstraint::Kind::kGrammar, *v, field, at);
    }
  }
}

}  // namespace request_fields

std::optional<OutputConstraint> read_response_format_file(const std::string& path) {
  const std::string what = "--response-format " + path;
  // Pretty-printed, a schema of kMaxConstraintBytes compact bytes takes a few times that.
  const std::string text =
      read_stream_file(path, "--response-format file", 4 * kMaxConstraintBytes);
  ordered_json v;
  try {
    v = parse_ordered_json(text, what);
  } catch (const json::exception& e) {
    fail(what, ": not valid JSON: ", request_fields::parser_message(e));
  }
  if (!v.is_object()) fail(what, ": expected a JSON object, got ", v.type_name());
  const FieldSite at{0, ""};
  try {
    std::optional<OutputConstraint> c = v.contains("type")
                                            ? response_format(v, "response_format", at)
                                            : structured_outputs(v, "structured_outputs", at);
    if (c) c->field = "--response-format " + path + " (" + c->field + ")";
    return c;
  } catch (const request_fields::BadLine& bad) {
    // "line 0: " is the reader's; the file is one value.
    std::string message = bad.message;
    if (message.rfind("line 0: ", 0) == 0) message.erase(0, 8);
    fail(what, ": ", message);
  }
}

}  // namespace tpllama
