// The fields of OpenAI's and vLLM's completions and chat APIs that tpllama does not read, each with
// the values at which it changes nothing, from those APIs' documented defaults.
#include "io/request_field_policy.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "core/json_text.h"

namespace tpllama::request_fields {
namespace {

using nlohmann::json;

// kAny: every value changes nothing. Otherwise `neutral` is the JSON of the one value besides null
// that changes nothing ("": null is the only one), and `chat_neutral` that value for chat requests
// where it differs.
constexpr const char* kAny = nullptr;
struct ForeignField {
  const char* name;
  const char* neutral;
  const char* chat_neutral = nullptr;
  const char* instead = nullptr;  // what a request asks for in its place
};

constexpr ForeignField kForeignFields[] = {
    // Any value: they name, label or route a request; the text is the same.
    {"model", kAny},  // --model answers every request (an OpenAI batch file names one on each line)
    {"user", kAny},
    {"metadata", kAny},
    {"store", kAny},
    {"service_tier", kAny},
    {"stream", kAny},  // a record is written whole either way
    {"stream_options", kAny},
    // Tool calls are never parsed out of the text (tool_choice "none" below).
    {"parallel_tool_calls", kAny},
    {"request_id", kAny},
    {"safety_identifier", kAny},
    {"prompt_cache_key", kAny},
    {"cache_salt", kAny},
    {"guided_decoding_backend", kAny},  // vLLM's choice of grammar engine; tpllama has its own
    // parse_generation_fields's own, read for completions and chats (kGenerationFields): a
    // scoring request takes them only at the value that changes nothing.
    {"presence_penalty", "0"},
    {"frequency_penalty", "0"},
    {"repetition_penalty", "1"},
    {"logit_bias", "{}"},
    {"min_tokens", "0"},
    {"stop_token_ids", "[]"},
    {"include_stop_str_in_output", "false"},
    {"skip_special_tokens", "true"},  // special tokens add no text (src/README.md, Requests)
    {"spaces_between_special_tokens", "true"},
    {"n", "1"},
    {"prompt_logprobs", ""},
    // Sampling and output controls tpllama lacks, at the default that leaves the text unchanged.
    {"length_penalty", "1"},
    {"best_of", "1", nullptr,
     "; ask for samples with 'n' (vLLM's V1 engine dropped best_of for it too)"},
    {"echo", "false"},  // read on completions (the readers' field lists)
    {"use_beam_search", "false"},
    {"bad_words", "[]"},
    {"priority", "0"},
    // Structured outputs: read on completions and chats (kConstraintFields); a scoring request
    // takes none.
    {"response_format", R"({"type":"text"})"},
    {"structured_outputs", ""},
    {"guided_json", ""},
    {"guided_regex", ""},
    {"guided_choice", ""},
    {"guided_grammar", ""},
    {"modalities", R"(["text"])"},
    // vLLM's default: the tools reach the template, and the text is the answer.
    {"tool_choice", R"("none")"},
    {"function_call", R"("none")"},
    // The prompt as tpllama builds it: BOS for a prompt, the template's own for a chat.
    {"add_special_tokens", "true", "false"},
    // Read on chat requests (parse_chat_fields, with "documents" below); a completion or scoring
    // request has no template to give them to.
    {"add_generation_prompt", "true"},
    {"continue_final_message", "false"},
    // Null only: any value asks for something tpllama does not do.
    {"suffix", ""},
    {"functions", ""},
    {"truncate_prompt_tokens", ""},
    {"allowed_token_ids", ""},
    {"logits_processors", ""},
    {"guided_whitespace_pattern", ""},
    {"chat_template", ""},
    {"documents", ""},
    {"mm_processor_kwargs", ""},
    {"reasoning_effort", ""},
    {"verbosity", ""},
    {"audio", ""},
    {"prediction", ""},
    {"web_search_options", ""},
};

const ForeignField* find_foreign(const std::string& key) {
  const auto it = std::find_if(std::begin(kForeignFields), std::end(kForeignFields),
                               [&](const ForeignField& f) { return key == f.name; });
  return it == std::end(kForeignFields) ? nullptr : &*it;
}

const char* kind_name(RequestKind kind) {
  switch (kind) {
    case RequestKind::kChat:
      return "a chat request";
    case RequestKind::kScoring:
      return "a scoring request";
    case RequestKind::kPrompt:
      break;
  }
  return "a completion request";
}

// Numbers compare by value, so 0.0 is 0 and 1.0 is 1; anything else compares as JSON.
bool same_value(const json& given, const json& neutral) {
  if (given.is_number() && neutral.is_number()) return given.get<double>() == neutral.get<double>();
  return given == neutral;
}

}  // namespace

void refuse_unread_fields(const json& object, const FieldSite& at,
                          std::span<const char* const> read, RequestKind kind) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    const auto is_key = [&](const char* k) { return key == k; };
    if (std::find_if(read.begin(), read.end(), is_key) != read.end()) continue;
    const bool generation_only =
        std::find_if(std::begin(kGenerationFields), std::end(kGenerationFields), is_key) !=
        std::end(kGenerationFields);
    if (generation_only && kind != RequestKind::kScoring) continue;
    const ForeignField* field = find_foreign(key);
    if (field == nullptr)
      reject(at, "unknown field '", at.name(key.c_str()), "' for ", kind_name(kind),
             ": refused, as ignoring it could change the output");
    if (field->neutral == kAny || it->is_null()) continue;
    const char* text =
        kind == RequestKind::kChat && field->chat_neutral ? field->chat_neutral : field->neutral;
    const json neutral = *text == '\0' ? json(nullptr) : json::parse(text);
    if (same_value(*it, neutral)) continue;
    if (generation_only)
      reject(at, "field '", at.name(key.c_str()), "' is ", describe_json(*it),
             ": a scoring request scores the model's own distribution (only ", neutral.dump(),
             ", which has no effect)");
    reject(at, "field '", at.name(key.c_str()), "' is ", describe_json(*it),
           ": tpllama does not support it (only ", neutral.dump(), ", which has no effect)",
           field->instead ? field->instead : "");
  }
}

}  // namespace tpllama::request_fields
