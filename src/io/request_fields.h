// The request fields of the JSON input formats, as one table (request_field_table.cpp): each
// field's name, which kinds of request in which format read it, its parser, and, where it is not
// read, the value at which it changes nothing. The JSONL and OpenAI batch readers, the refusal of
// fields that would be ignored, and src/README.md's field reference all follow the table. Internal
// to src/io: a parser throws BadLine with a message naming the line and field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
// deeper than kMaxJsonDepth (its fields are walked recursively later on) or holding more than
// kMaxLineJsonValues values (core/json_text.h) is refused unparsed.
bool parse_object_line(const std::string& line, nlohmann::json& object, Request& req);

// A prompt given as token ids: a non-empty JSON array of integers in [0, 2^31), into req.token_ids
// (used as given: no BOS is added). False when v is not an array; an array of anything else is
// rejected. The engine checks the ids against the vocabulary.
bool parse_token_ids(const nlohmann::json& v, const FieldSite& at, const char* key, Request& req);

// A kind of request in one input format: the fields it reads are the table's for it.
enum Taker : uint8_t {
  kJsonlCompletion = 1 << 0,  // a JSONL line with "prompt"
  kJsonlScoring = 1 << 1,     // a JSONL line with "context" and "continuation"
  kJsonlChat = 1 << 2,        // a JSONL line with "messages"
  kBatchCompletion = 1 << 3,  // an OpenAI batch body of /v1/completions
  kBatchChat = 1 << 4,        // an OpenAI batch body of /v1/chat/completions
};
using Takers = uint8_t;
inline constexpr Takers kJsonl = kJsonlCompletion | kJsonlScoring | kJsonlChat;
inline constexpr Takers kCompletions = kJsonlCompletion | kBatchCompletion;
inline constexpr Takers kChats = kJsonlChat | kBatchChat;
inline constexpr Takers kGenerations = kCompletions | kChats;  // every kind but scoring
inline constexpr Takers kAllTakers = kGenerations | kJsonlScoring;

// "a completion request", "a scoring request", "a chat request".
const char* taker_name(Taker taker);

// What a parser is given: the request's fields (a JSONL line's object, a batch line's body) and
// where they are.
class FieldInput {
 public:
  // line: the whole input line; in_body: the fields are its "body" (a batch line).
  FieldInput(const nlohmann::json& object, std::string_view line, bool in_body, FieldSite at,
             Taker taker)
      : object_(object), line_(line), in_body_(in_body), at_(std::move(at)), taker_(taker) {}

  const nlohmann::json& object() const { return object_; }
  // The fields again with their keys in their given order (a template may print a message with
  // tojson; a schema's properties come in its order), parsed from the line at the first need.
  const nlohmann::ordered_json& ordered() const;
  const FieldSite& at() const { return at_; }
  Taker taker() const { return taker_; }

 private:
  const nlohmann::json& object_;
  std::string_view line_;
  bool in_body_;
  FieldSite at_;
  Taker taker_;
  mutable std::optional<nlohmann::ordered_json> ordered_;
};

// Reads its field (and the fields it goes with) into the request, or throws BadLine. It runs
// whether or not the field is given: absent and null mean the request's default.
using FieldParser = void (*)(const FieldInput& in, Request& req);

// When a field is read: kIdentity (JSONL's id, before the request's kind is known), kRequest (what
// the request is for: read before the fields it does not read are refused, so that a missing
// prompt is the error reported), kOption (everything else, after the refusals).
enum class FieldStage : uint8_t { kIdentity, kRequest, kOption };

// The JSON text of a field's neutral value where it is not read: kAnyValue for a field that never
// changes the output (it names, labels or routes a request), "" for null only, kUnknownThere (a
// null pointer) for a field no request of that kind takes at all.
inline constexpr const char* kAnyValue = "*";
inline constexpr const char* kUnknownThere = nullptr;

struct RequestField {
  const char* name;
  Takers read_by;
  FieldStage stage;
  FieldParser parse;                   // null where the parser of the field it goes with reads it
  const char* neutral;                 // where it is not read (see kAnyValue)
  const char* chat_neutral = nullptr;  // a chat request's neutral value, where it differs
  // A generation setting: a scoring request refuses any other value than its neutral one as not
  // scoring the model's own distribution.
  bool generation = false;
  bool constraint = false;        // one of the structured-output fields (one per request)
  const char* instead = nullptr;  // what a request asks for in its place, in a refusal
};

// Every field, in the order the readers parse them.
std::span<const RequestField> request_fields();
// The row of field `name`; null for a name no request has.
const RequestField* find_request_field(std::string_view name);
// The structured-output fields, in the order parse_output_constraint reads them.
std::span<const char* const> constraint_fields();

// Parses, in the table's order, the fields of `stage` that `in`'s taker reads.
void read_fields(FieldStage stage, const FieldInput& in, Request& req);
// Throws BadLine for the first field of in.object() (in key order) that its taker does not read
// and that is not at a value that changes nothing there (a field given as null counts as absent
// when some request takes it). Unknown fields are refused by name: ignoring one could change the
// output.
void refuse_unread_fields(const FieldInput& in);
// The whole body of a request once its kind is known: the kRequest fields, the refusals, then
// the kOption fields.
void read_request(const FieldInput& in, Request& req);

// kIntegerOrBool: JSONL's "logprobs" (true: the chosen token only); kIntegerOnly: the completions
// body's; kChat: the chat completions body's "logprobs": true with "top_logprobs": n.
enum class LogprobsSyntax { kIntegerOrBool, kIntegerOnly, kChat };

// The parsers of the table (request_fields.cpp, output_constraint.cpp), each reading the field of
// its name.
void parse_id(const FieldInput& in, Request& req);
void parse_prompt(const FieldInput& in, Request& req);
void parse_messages(const FieldInput& in, Request& req);
void parse_tools(const FieldInput& in, Request& req);
void parse_chat_template_kwargs(const FieldInput& in, Request& req);
void parse_documents(const FieldInput& in, Request& req);
// add_generation_prompt and continue_final_message.
void parse_generation_prompt(const FieldInput& in, Request& req);
void parse_context(const FieldInput& in, Request& req);
void parse_continuation(const FieldInput& in, Request& req);
// max_tokens, or the chat API's newer max_completion_tokens (not both).
void parse_max_tokens(const FieldInput& in, Request& req);
void parse_temperature(const FieldInput& in, Request& req);
void parse_top_k(const FieldInput& in, Request& req);
void parse_top_p(const FieldInput& in, Request& req);
void parse_min_p(const FieldInput& in, Request& req);
void parse_seed(const FieldInput& in, Request& req);
void parse_ignore_eos(const FieldInput& in, Request& req);
void parse_stop(const FieldInput& in, Request& req);
void parse_logprobs(const FieldInput& in, Request& req);
void parse_top_logprobs(const FieldInput& in, Request& req);
void parse_presence_penalty(const FieldInput& in, Request& req);
void parse_frequency_penalty(const FieldInput& in, Request& req);
void parse_repetition_penalty(const FieldInput& in, Request& req);
void parse_logit_bias(const FieldInput& in, Request& req);
void parse_min_tokens(const FieldInput& in, Request& req);
void parse_stop_token_ids(const FieldInput& in, Request& req);
void parse_include_stop_str_in_output(const FieldInput& in, Request& req);
void parse_skip_special_tokens(const FieldInput& in, Request& req);
void parse_return_tokens_as_token_ids(const FieldInput& in, Request& req);
void parse_spaces_between_special_tokens(const FieldInput& in, Request& req);
void parse_echo(const FieldInput& in, Request& req);
void parse_prompt_logprobs(const FieldInput& in, Request& req);
void parse_n(const FieldInput& in, Request& req);
void parse_truncate_prompt_tokens(const FieldInput& in, Request& req);
// The structured-output fields (constraint_fields(); at most one of them): req.constraint, read
// from the fields in their given order (a schema's properties come in its order). A field given
// replaces the --response-format default, and response_format {"type": "text"} removes it.
// Rejects a malformed or unsupported value, or a text over kMaxConstraintBytes
// (io/output_constraint.h); the schema, pattern or grammar itself is compiled, and refused, later.
void parse_output_constraint(const FieldInput& in, Request& req);

}  // namespace tpllama::request_fields
