// The OpenAI Batch file convention (as read by `vllm run-batch`): request lines carrying a
// /v1/completions or /v1/chat/completions body, and the response lines written back, one choice
// each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/request.h"

namespace tpllama {

// Fills req (line and sampling defaults already set, id null) from one parsed batch line (`line`
// its text, read again for a chat body's keys in order). A bad line sets req.error naming the line
// and field: a wrong envelope (custom_id, method, url, body) also sets req.line_failed, a body
// field the request cannot have (the request field table, io/request_fields.h) does not.
void parse_openai_batch_request(const nlohmann::json& object, const std::string& line,
                                Request& req);

// 16 lowercase hex digits derived from the id alone (FNV-1a of id_key), so reruns agree; from the
// input line for a record without an id.
std::string openai_request_hex(const Result& r);

// The legacy completions layout: {"tokens", "token_logprobs", "top_logprobs": [{token: lp}],
// "text_offset"}, text_offset[i] being where token i's text starts in the text (in code points, as
// Python counts them: the sum of the earlier tokens' lengths); an echoed prompt's first token has
// null for its logprob and its top ones.
nlohmann::ordered_json logprobs_to_json(const std::vector<TokenLogprob>& logprobs);

// vLLM's prompt_logprobs: [null, then for each later prompt position {"<token id>": {"logprob",
// "rank", "decoded_token"}}, the prompt's own token first, then the most likely ones].
nlohmann::ordered_json prompt_logprobs_to_json(const std::vector<PositionLogprobs>& positions);

// What a response body says made it: "model" (--served-model-name, else the model directory's
// name) and "system_fingerprint" (the weights and how they are held; "" writes null).
struct RecordOrigin {
  std::string model;
  std::string system_fingerprint;
};

// One output line's object: {"id", "custom_id", "response", "error"}; created is the unix time
// stamped into a successful response body. A refused request's response is a 400 whose body holds
// the error, and "error" is null (as OpenAI writes a request its endpoint refused); a line that was
// no request (Result::line_failed) has a null response and the error (code "invalid_request").
nlohmann::ordered_json openai_batch_record(const Result& r, const RecordOrigin& origin,
                                           int64_t created);

}  // namespace tpllama
