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

// Fills req (line, default id and sampling already set) from one parsed batch line (`line` its
// text, read again for a chat body's keys in order); a bad line sets req.error naming the line and
// field. Names of fields it ignores ("body.model", ...) are appended to ignored, for the caller to
// warn about once each.
void parse_openai_batch_request(const nlohmann::json& object, const std::string& line, Request& req,
                                std::vector<std::string>& ignored);

// 16 lowercase hex digits derived from the id alone (FNV-1a of id_key), so reruns agree.
std::string openai_request_hex(const nlohmann::json& id);

// The legacy completions layout: {"tokens", "token_logprobs", "top_logprobs": [{token: lp}]}.
nlohmann::ordered_json logprobs_to_json(const std::vector<TokenLogprob>& logprobs);

// One output line's object: {"id", "custom_id", "response": {...}, "error"}; created is the
// unix time stamped into a successful response body.
nlohmann::ordered_json openai_batch_record(const Result& r, const std::string& model_name,
                                           int64_t created);

}  // namespace tpllama
