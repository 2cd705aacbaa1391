// The request field table: every field of OpenAI's and vLLM's completions and chat APIs that a
// request may carry, which kinds of request read it, and where one does not, the value at which it
// changes nothing (from those APIs' documented defaults). A request field is added here, as one
// row, beside the code that acts on it.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "core/json_text.h"
#include "io/request_fields.h"

namespace tpllama::request_fields {
namespace {

using nlohmann::json;
using Stage = FieldStage;

// Rows in the order the readers parse them (which orders a line's errors). Where a field is not
// read, `neutral` decides (request_fields.h): kAnyValue, a value, "" (null only), or kUnknownThere.
constexpr RequestField kFields[] = {
    // JSONL's id, before the request's kind is known (a batch line's is its custom_id).
    {"id", kJsonl, Stage::kIdentity, parse_id, kUnknownThere},
    // What the request is for.
    {"prompt", kCompletions, Stage::kRequest, parse_prompt, kUnknownThere},
    {"messages", kChats, Stage::kRequest, parse_messages, kUnknownThere},
    {"tools", kChats, Stage::kRequest, parse_tools, kUnknownThere},
    {"chat_template_kwargs", kChats, Stage::kRequest, parse_chat_template_kwargs, kUnknownThere},
    // A completion or scoring request has no template to give these to.
    {"documents", kChats, Stage::kRequest, parse_documents, ""},
    {"add_generation_prompt", kChats, Stage::kRequest, parse_generation_prompt, "true"},
    {"continue_final_message", kChats, Stage::kRequest, nullptr, "false"},
    {"context", kJsonlScoring, Stage::kRequest, parse_context, kUnknownThere},
    {"continuation", kJsonlScoring, Stage::kRequest, parse_continuation, kUnknownThere},
    // Sampling and output settings (a scoring request reads these but scores either way).
    {"max_tokens", kAllTakers, Stage::kOption, parse_max_tokens, kUnknownThere},
    {"max_completion_tokens", kAllTakers & ~kBatchCompletion, Stage::kOption, nullptr,
     kUnknownThere},
    {"temperature", kAllTakers, Stage::kOption, parse_temperature, kUnknownThere},
    {"top_k", kAllTakers, Stage::kOption, parse_top_k, kUnknownThere},
    {"top_p", kAllTakers, Stage::kOption, parse_top_p, kUnknownThere},
    {"min_p", kAllTakers, Stage::kOption, parse_min_p, kUnknownThere},
    {"seed", kAllTakers, Stage::kOption, parse_seed, kUnknownThere},
    {"ignore_eos", kAllTakers, Stage::kOption, parse_ignore_eos, kUnknownThere},
    {"stop", kAllTakers, Stage::kOption, parse_stop, kUnknownThere},
    {"logprobs", kAllTakers, Stage::kOption, parse_logprobs, kUnknownThere},
    {"top_logprobs", kBatchChat, Stage::kOption, parse_top_logprobs, kUnknownThere},
    // Generation settings: penalties and biases, vLLM's stop and detokenization options, samples,
    // prompt logprobs; a scoring request takes each only at its neutral value.
    {"presence_penalty", kGenerations, Stage::kOption, parse_presence_penalty, "0", nullptr, true},
    {"frequency_penalty", kGenerations, Stage::kOption, parse_frequency_penalty, "0", nullptr,
     true},
    {"repetition_penalty", kGenerations, Stage::kOption, parse_repetition_penalty, "1", nullptr,
     true},
    {"logit_bias", kGenerations, Stage::kOption, parse_logit_bias, "{}", nullptr, true},
    {"min_tokens", kGenerations, Stage::kOption, parse_min_tokens, "0", nullptr, true},
    {"stop_token_ids", kGenerations, Stage::kOption, parse_stop_token_ids, "[]", nullptr, true},
    {"include_stop_str_in_output", kGenerations, Stage::kOption, parse_include_stop_str_in_output,
     "false", nullptr, true},
    // Special tokens add no text (src/README.md, Requests).
    {"skip_special_tokens", kGenerations, Stage::kOption, parse_skip_special_tokens, "true",
     nullptr, true},
    {"return_tokens_as_token_ids", kGenerations, Stage::kOption, parse_return_tokens_as_token_ids,
     "false", nullptr, true},
    {"spaces_between_special_tokens", kGenerations, Stage::kOption,
     parse_spaces_between_special_tokens, "true", nullptr, true},
    {"echo", kCompletions, Stage::kOption, parse_echo, "false"},
    {"prompt_logprobs", kGenerations, Stage::kOption, parse_prompt_logprobs, "", nullptr, true},
    {"n", kGenerations, Stage::kOption, parse_n, "1", nullptr, true},
    {"truncate_prompt_tokens", kAllTakers, Stage::kOption, parse_truncate_prompt_tokens,
     kUnknownThere},
    // Structured outputs, one per request (parse_output_constraint reads them all).
    {"response_format", kGenerations, Stage::kOption, parse_output_constraint, R"({"type":"text"})",
     nullptr, true, true},
    {"structured_outputs", kGenerations, Stage::kOption, nullptr, "", nullptr, true, true},
    {"guided_json", kGenerations, Stage::kOption, nullptr, "", nullptr, true, true},
    {"guided_regex", kGenerations, Stage::kOption, nullptr, "", nullptr, true, true},
    {"guided_choice", kGenerations, Stage::kOption, nullptr, "", nullptr, true, true},
    {"guided_grammar", kGenerations, Stage::kOption, nullptr, "", nullptr, true, true},
    // Read by no request. At any value: they name, label or route a request; the text is the same.
    {"model", 0, Stage::kOption, nullptr, kAnyValue},  // --model answers every request
    {"user", 0, Stage::kOption, nullptr, kAnyValue},
    {"metadata", 0, Stage::kOption, nullptr, kAnyValue},
    {"store", 0, Stage::kOption, nullptr, kAnyValue},
    {"service_tier", 0, Stage::kOption, nullptr, kAnyValue},
    {"stream", 0, Stage::kOption, nullptr, kAnyValue},  // a record is written whole either way
    {"stream_options", 0, Stage::kOption, nullptr, kAnyValue},
    // Tool calls are never parsed out of the text (tool_choice "none" below).
    {"parallel_tool_calls", 0, Stage::kOption, nullptr, kAnyValue},
    {"request_id", 0, Stage::kOption, nullptr, kAnyValue},
    {"safety_identifier", 0, Stage::kOption, nullptr, kAnyValue},
    {"prompt_cache_key", 0, Stage::kOption, nullptr, kAnyValue},
    {"cache_salt", 0, Stage::kOption, nullptr, kAnyValue},
    // vLLM's choice of grammar engine; tpllama has its own.
    {"guided_decoding_backend", 0, Stage::kOption, nullptr, kAnyValue},
    // Sampling and output controls tpllama lacks, at the default that leaves the text unchanged.
    {"length_penalty", 0, Stage::kOption, nullptr, "1"},
    {"best_of", 0, Stage::kOption, nullptr, "1", nullptr, false, false,
     "; ask for samples with 'n' (vLLM's V1 engine dropped best_of for it too)"},
    {"use_beam_search", 0, Stage::kOption, nullptr, "false"},
    {"bad_words", 0, Stage::kOption, nullptr, "[]"},
    {"priority", 0, Stage::kOption, nullptr, "0"},
    {"modalities", 0, Stage::kOption, nullptr, R"(["text"])"},
    // vLLM's default: the tools reach the template, and the text is the answer.
    {"tool_choice", 0, Stage::kOption, nullptr, R"("none")"},
    {"function_call", 0, Stage::kOption, nullptr, R"("none")"},
    // The prompt as tpllama builds it: BOS for a prompt, the template's own for a chat.
    {"add_special_tokens", 0, Stage::kOption, nullptr, "true", "false"},
    // Null only: any value asks for something tpllama does not do.
    {"suffix", 0, Stage::kOption, nullptr, ""},
    {"functions", 0, Stage::kOption, nullptr, ""},
    {"allowed_token_ids", 0, Stage::kOption, nullptr, ""},
    {"logits_processors", 0, Stage::kOption, nullptr, ""},
    {"guided_whitespace_pattern", 0, Stage::kOption, nullptr, ""},
    {"chat_template", 0, Stage::kOption, nullptr, ""},
    {"mm_processor_kwargs", 0, Stage::kOption, nullptr, ""},
    {"reasoning_effort", 0, Stage::kOption, nullptr, ""},
    {"verbosity", 0, Stage::kOption, nullptr, ""},
    {"audio", 0, Stage::kOption, nullptr, ""},
    {"prediction", 0, Stage::kOption, nullptr, ""},
    {"web_search_options", 0, Stage::kOption, nullptr, ""},
};

// Numbers compare by value, so 0.0 is 0 and 1.0 is 1; anything else compares as JSON.
bool same_value(const json& given, const json& neutral) {
  if (given.is_number() && neutral.is_number()) return given.get<double>() == neutral.get<double>();
  return given == neutral;
}

}  // namespace

std::span<const RequestField> request_fields() {
  return kFields;
}

const RequestField* find_request_field(std::string_view name) {
  const auto it = std::find_if(std::begin(kFields), std::end(kFields),
                               [&](const RequestField& f) { return name == f.name; });
  return it == std::end(kFields) ? nullptr : &*it;
}

std::span<const char* const> constraint_fields() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> v;
    for (const RequestField& f : kFields)
      if (f.constraint) v.push_back(f.name);
    return v;
  }();
  return names;
}

const char* taker_name(Taker taker) {
  if (taker & kChats) return "a chat request";
  if (taker & kJsonlScoring) return "a scoring request";
  return "a completion request";
}

void read_fields(FieldStage stage, const FieldInput& in, Request& req) {
  for (const RequestField& f : kFields)
    if (f.stage == stage && (f.read_by & in.taker()) && f.parse != nullptr) f.parse(in, req);
}

void refuse_unread_fields(const FieldInput& in) {
  const FieldSite& at = in.at();
  const json& object = in.object();
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    const RequestField* field = find_request_field(key);
    if (field != nullptr && (field->read_by & in.taker())) continue;
    if (field == nullptr || field->neutral == kUnknownThere)
      reject(at, "unknown field '", at.name(key.c_str()), "' for ", taker_name(in.taker()),
             ": refused, as ignoring it could change the output");
    if (field->neutral == kAnyValue || it->is_null()) continue;
    const char* text =
        (in.taker() & kChats) && field->chat_neutral ? field->chat_neutral : field->neutral;
    const json neutral = *text == '\0' ? json(nullptr) : json::parse(text);
    if (same_value(*it, neutral)) continue;
    if (field->generation)
      reject(at, "field '", at.name(key.c_str()), "' is ", describe_json(*it),
             ": a scoring request scores the model's own distribution (only ", neutral.dump(),
             ", which has no effect)");
    reject(at, "field '", at.name(key.c_str()), "' is ", describe_json(*it),
           ": tpllama does not support it (only ", neutral.dump(), ", which has no effect)",
           field->instead ? field->instead : "");
  }
}

void read_request(const FieldInput& in, Request& req) {
  // What the request is for first (a missing prompt is the error to report), then the other
  // fields.
  read_fields(FieldStage::kRequest, in, req);
  refuse_unread_fields(in);
  read_fields(FieldStage::kOption, in, req);
}

}  // namespace tpllama::request_fields
