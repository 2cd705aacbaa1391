// One inference request as read from the prompt file, and the record written back for it.
// Requests arrive fully resolved: the driver never consults the command-line defaults again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sampling_params.h"

namespace tpllama {

// Command-line settings that apply to every request that does not say otherwise.
struct RequestDefaults {
  int max_tokens = 256;
  SamplingParams sampling;
  uint64_t seed = 0;  // base for the per-request seeds (see PromptReader)
};

constexpr int kMaxLogprobs = 20;

struct Request {
  // As given (string or number); default: the 1-based line number. Null for a JSON line whose id
  // could not be read (not JSON, not an object, an id of the wrong type or none in a batch line).
  nlohmann::json id;
  size_t line = 0;  // 1-based line number in the input file
  std::string prompt;
  int max_tokens = 256;
  SamplingParams sampling;  // resolved: request fields override defaults
  LogitRules logit_rules;   // penalties, logit_bias, min_tokens (ids checked against the vocabulary
                            // at intake)
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // vLLM's: these ids end it too ("stop", stop_reason: id)
  bool include_stop_str_in_output = false;  // the stop string (or stop id's text) stays in the text
  bool skip_special_tokens = true;          // false: control tokens' pieces are part of the text
  bool ignore_eos = false;  // generate max_tokens whatever the model's stop ids say (benchmarks)
  int logprobs = -1;  // -1: not requested; 0..kMaxLogprobs: chosen token plus that many top ones
  // Scoring requests ({"context", "continuation"}): no generation; the log-probability of the
  // continuation given the context. token_ids, when set, are used as they are: the prompt of a
  // generation request (benchmarks), or a scoring window whose first n_context_tokens are context.
  bool scoring = false;
  std::string context;
  std::string continuation;
  std::vector<int> token_ids;
  int n_context_tokens = 0;
  // A chat request: the conversation ([{"role", "content", ...}], keys in their given order) that
  // the model's chat template renders into the prompt, and what else the template is given
  // ("tools", "documents", the keys of "chat_template_kwargs").
  std::optional<nlohmann::ordered_json> messages;
  nlohmann::ordered_json chat_variables = nlohmann::ordered_json::object();
  // Hugging Face's apply_chat_template options: the assistant header after the conversation, or
  // (continue_final_message, never with it) the last assistant message left open, its end of turn
  // cut off, for the model to go on with it.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::string error;  // non-empty: the request is invalid; the message names the line
  // With error: the line is no request at all (not a JSON object, too long, a batch line's envelope
  // wrong, a repeated id), as against a request refused for its fields (an HTTP 400 in OpenAI's
  // terms). OpenAI's batch output answers such a line with an error and no response.
  bool line_failed = false;

  bool chat() const { return messages.has_value(); }
};

// One generated token: its text, its logprob, and the top alternatives (most likely first).
struct TokenLogprob {
  std::string token;
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;
};

// The answer to a scoring request.
struct ScoreResult {
  double logprob = 0;                  // sum over the continuation tokens
  bool is_greedy = true;               // every continuation token was the argmax
  int n_tokens = 0;                    // continuation tokens
  std::vector<double> token_logprobs;  // filled when the request asked for logprobs
};

struct Result {
  nlohmann::json id;
  bool chat = false;  // answers a chat request (OpenAI batch: a chat.completion body)
  std::string text;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::string finish_reason;  // "stop" | "length" | "error"
  // vLLM's stop_reason: the stop string or stop_token_ids id that ended it; null for EOS, length.
  nlohmann::json stop_reason = nullptr;
  std::string error;  // written only when finish_reason == "error"
  size_t line = 0;    // input line, written with error records
  // Set when the request asked for logprobs. The explicit initializer keeps Result{...} aggregate
  // initialisations that stop at error free of -Wmissing-field-initializers.
  std::optional<std::vector<TokenLogprob>> logprobs = std::nullopt;
  std::optional<ScoreResult> score = std::nullopt;  // set for scoring requests
  bool line_failed = false;  // an error record of a line that is no request (Request::line_failed)
};

// Canonical text of an id (its compact JSON), so "7" and 7 stay distinct and an id read back from
// an output file matches the request it came from. Never throws on invalid UTF-8.
std::string id_key(const nlohmann::json& id);
// Key of an error record in a resume index: error records carry their input line, since their id
// may be made up (unparseable line) or shared (duplicate id).
std::string error_line_key(size_t line);

}  // namespace tpllama
