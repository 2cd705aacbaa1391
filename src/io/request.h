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

// What a request's output must be (structured outputs): a JSON value of a schema, any JSON object,
// a match of a regex, one of a list of strings, or a sentence of a GBNF grammar. Kept as text, the
// key of the engine's compiled-grammar cache; compiled (and refused) at intake, on rank 0.
inline constexpr int kDefaultJsonDigits = 15;  // what a double holds exactly

struct OutputConstraint {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  // kJsonSchema: the schema as compact JSON, keys in their given order; kRegex: the pattern;
  // kChoice: the choices as a compact JSON list of strings; kGrammar: the GBNF text.
  std::string text;
  std::string field;  // the field that gave it ("response_format", "guided_regex"), for messages
  // JSON (a schema or any object): no whitespace between tokens (vLLM's disable_any_whitespace).
  bool compact = false;
  // JSON: the digits of a number's integer part where its schema leaves it unbounded, and of its
  // fraction (--json-max-digits).
  int max_digits = kDefaultJsonDigits;

  bool operator==(const OutputConstraint&) const = default;
};

// Command-line settings that apply to every request that does not say otherwise.
struct RequestDefaults {
  int max_tokens = 256;
  SamplingParams sampling;
  uint64_t seed = 0;  // base for the per-request seeds (see PromptReader)
  int n = 1;          // samples per completion or chat request
  // --response-format: the constraint of every completion and chat that gives none of its own.
  std::optional<OutputConstraint> constraint;
  int json_max_digits = kDefaultJsonDigits;  // --json-max-digits: every constraint's max_digits
};

constexpr int kMaxLogprobs = 20;
constexpr int kMaxSamples = 128;  // a request's n, at most

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
  // vLLM's: logprobs name each token "token_id:<id>" instead of by its text.
  bool return_tokens_as_token_ids = false;
  bool ignore_eos = false;  // generate max_tokens whatever the model's stop ids say (benchmarks)
  int logprobs = -1;  // -1: not requested; 0..kMaxLogprobs: chosen token plus that many top ones
  // Completions: the prompt's text is written before the completion's; with logprobs, the prompt
  // tokens' log-probabilities come first in them (the first null), as OpenAI's legacy API does.
  bool echo = false;
  // vLLM's prompt_logprobs: -1 none; k >= 0: each prompt token's log-probability, rank and the k
  // most likely tokens at its position (the first token: null).
  int prompt_logprobs = -1;
  // Samples of the prompt (1..kMaxSamples): they share its KV cache and make one record of n
  // choices; sample k draws from the stream sample_seed(sampling.seed, k).
  int n = 1;
  // vLLM's truncate_prompt_tokens: 0 off; k > 0 keeps the prompt's last k tokens (BOS is one of
  // them), -1 its last context (--max-model-len) tokens. A scoring request's context shrinks.
  int truncate_prompt_tokens = 0;
  int prompt_tokens_cut = 0;  // set at intake: the tokens truncate_prompt_tokens cut
  // Structured outputs: what the completion must be (none: free text). Completions and chats only.
  std::optional<OutputConstraint> constraint;
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
  bool null = false;  // the first prompt token of an echo: no log-probability (written null)
};

// One token at a prompt position as vLLM's prompt_logprobs lists it: its id, text, log-probability
// and rank (1 + the tokens more likely than it).
struct RankedLogprob {
  int32_t token = 0;
  std::string text;
  double logprob = 0;
  int rank = 0;
};
// A prompt position's: the prompt's own token first, then the most likely ones, best first.
using PositionLogprobs = std::vector<RankedLogprob>;

// The answer to a scoring request.
struct ScoreResult {
  double logprob = 0;                  // sum over the continuation tokens
  bool is_greedy = true;               // every continuation token was the argmax
  int n_tokens = 0;                    // continuation tokens
  std::vector<double> token_logprobs;  // filled when the request asked for logprobs
};

// One of the n samples of a request, as a record's "choices" lists it.
struct Choice {
  int index = 0;
  std::string text;
  int completion_tokens = 0;
  std::string finish_reason;
  nlohmann::json stop_reason = nullptr;
  std::optional<std::vector<TokenLogprob>> logprobs = std::nullopt;
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs = std::nullopt;
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
  // prompt_logprobs: each prompt position's after the first (written after a leading null).
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs = std::nullopt;
  bool line_failed = false;  // an error record of a line that is no request (Request::line_failed)
  // A request of n > 1 samples: every one, by index (join_samples); text, stop_reason and logprobs
  // above are then unused, completion_tokens is their sum and finish_reason the first one's.
  std::vector<Choice> choices = {};
  // Its number among the job's records in input order (the gate's); records written out of order
  // (several replicas) are put back in order by it under --ordered.
  uint64_t order = 0;
};

// The record of a request of n > 1 samples from each sample's own (samples[k] is sample k): the
// prompt counted once, the completions summed. An error record when any sample failed.
Result join_samples(std::vector<Result> samples);

// Canonical text of an id (its compact JSON), so "7" and 7 stay distinct and an id read back from
// an output file matches the request it came from. Never throws on invalid UTF-8.
std::string id_key(const nlohmann::json& id);
// Key of an error record in a resume index: error records carry their input line, since their id
// may be made up (unparseable line) or shared (duplicate id).
std::string error_line_key(size_t line);

}  // namespace tpllama
