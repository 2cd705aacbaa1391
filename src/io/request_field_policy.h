// Which fields a request may carry besides those tpllama reads: OpenAI's and vLLM's fields that
// change no output (taken at any value), and those tpllama lacks, taken only at the value that
// changes nothing. Any other field refuses the request, naming it. Internal to src/io.
#pragma once

#include <span>

#include <nlohmann/json.hpp>

#include "io/request_fields.h"

namespace tpllama::request_fields {

// What the request asks for (named in messages): add_special_tokens changes nothing at true for a
// prompt or a scoring request (BOS is added, as vLLM's completions do) and at false for a chat (the
// template writes BOS).
enum class RequestKind { kPrompt, kScoring, kChat };

// Throws BadLine for the first field of `object` (in key order) that is not one of `read` (the
// fields the format reads for this kind of request), nor of kGenerationFields (read by every kind
// but scoring), and not one that changes nothing at the value
// given. A field given as null counts as absent when it is one of OpenAI's or vLLM's.
void refuse_unread_fields(const nlohmann::json& object, const FieldSite& at,
                          std::span<const char* const> read, RequestKind kind);

}  // namespace tpllama::request_fields
