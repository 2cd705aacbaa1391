// Validation of the request fields shared by the JSONL and OpenAI batch readers. Internal to
// src/io: each check throws BadLine with a message naming the line and field.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/request.h"

namespace tpllama::request_fields {

// Thrown while validating one line; the reader catches it and sets Request::error.
struct BadLine {
  std::string message;
};

// Where the fields sit: the 1-based input line and the path of their object ("" or "body.").
struct FieldSite {
  size_t line = 0;
  std::string prefix;
  std::string name(const char* key) const { return prefix + key; }
};

template <typename... Args>
[[noreturn]] void reject(const FieldSite& at, Args&&... args) {
  throw BadLine{detail::concat("line ", at.line, ": ", std::forward<Args>(args)...)};
}

// Optional fields: absent and null both mean "use the default".
const nlohmann::json* find_field(const nlohmann::json& object, const char* key);

// The parser's reason without its exception tag, clipped for a message.
std::string parser_message(const nlohmann::json::exception& e);

// Parses one line as a JSON object; on failure sets req.error and returns false. A line nested
// deeper than kMaxJsonDepth is refused unparsed (its fields are walked recursively later on).
bool parse_object_line(const std::string& line, nlohmann::json& object, Request& req);

// A prompt given as token ids: a non-empty JSON array of integers in [0, 2^31), into req.token_ids
// (used as given: no BOS is added). False when v is not an array; an array of anything else is
// rejected. The engine checks the ids against the vocabulary.
bool parse_token_ids(const nlohmann::json& v, const FieldSite& at, const char* key, Request& req);

// A chat request's fields, from its object parsed with keys in order (a template may print a
// message or a tool with tojson): "messages", a non-empty list of objects, each with a string
// "role" and a "content" that is a string, null, or a list of {"type": "text", "text"} parts
// (joined with "\n", as vLLM does); "tools" (a list), "documents" (a list of objects) and the keys
// of "chat_template_kwargs" (an object) become template variables; "add_generation_prompt" and
// "continue_final_message" (booleans; continuing needs an assistant message last and
// add_generation_prompt false).
void parse_chat_fields(const nlohmann::ordered_json& object, const FieldSite& at, Request& req);

// kIntegerOrBool: JSONL's "logprobs" (true: the chosen token only); kIntegerOnly: the completions
// body's; kChat: the chat completions body's "logprobs": true with "top_logprobs": n.
enum class LogprobsSyntax { kIntegerOrBool, kIntegerOnly, kChat };

// The fields parse_generation_fields reads besides the sampling ones: a request's LogitRules,
// vLLM's stop and detokenization options and its sample count, and the structured-output fields
// parse_output_constraint reads, which only completions and chats take (a scoring request only at
// the value that changes nothing).
inline constexpr const char* kGenerationFields[] = {"presence_penalty",
                                                    "frequency_penalty",
                                                    "repetition_penalty",
                                                    "logit_bias",
                                                    "min_tokens",
                                                    "stop_token_ids",
                                                    "include_stop_str_in_output",
                                                    "skip_special_tokens",
                                                    "return_tokens_as_token_ids",
                                                    "spaces_between_special_tokens",
                                                    "n",
                                                    "prompt_logprobs",
                                                    "response_format",
                                                    "structured_outputs",
                                                    "guided_json",
                                                    "guided_regex",
                                                    "guided_choice",
                                                    "guided_grammar"};

// The fields that constrain the output (parse_output_constraint), of kGenerationFields.
inline constexpr const char* kConstraintFields[] = {"response_format", "structured_outputs",
                                                    "guided_json",     "guided_regex",
                                                    "guided_choice",   "guided_grammar"};

// max_tokens, temperature, top_k, top_p, min_p, seed, stop, logprobs, echo (which only the
// completions' field lists name) and kGenerationFields,
// overriding req's values (fields it does not read are refuse_unread_fields's,
// request_field_policy.h).
void parse_generation_fields(const nlohmann::json& object, const FieldSite& at,
                             LogprobsSyntax logprobs_syntax, Request& req);

// The structured-output fields (kConstraintFields; at most one of them): req.constraint, read
// from the object parsed with its keys in order (a schema's properties come in its order). A field
// given replaces the --response-format default, and response_format {"type": "text"} removes it.
// Rejects a malformed or unsupported value, or a text over kMaxConstraintBytes
// (io/output_constraint.h); the schema, pattern or grammar itself is compiled, and refused, later.
void parse_output_constraint(const nlohmann::ordered_json& object, const FieldSite& at,
                             Request& req);
// Whether object gives any of kConstraintFields (not null): the line is then read again in order.
bool has_constraint_field(const nlohmann::json& object);

}  // namespace tpllama::request_fields
