// One inference request as read from the prompt file, and the record written back for it.
// Requests arrive fully resolved: the driver never consults the command-line defaults again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampling_params.h"

namespace tpllama {

// Command-line settings that apply to every request that does not say otherwise.
struct RequestDefaults {
  int max_tokens = 256;
  SamplingParams sampling;
  uint64_t seed = 0;  // base for the per-request seeds (see PromptReader)
};

struct Request {
  nlohmann::json id;  // as given (string or number); default: the 1-based line number
  size_t line = 0;    // 1-based line number in the input file
  std::string prompt;
  int max_tokens = 256;
  SamplingParams sampling;  // resolved: request fields override defaults
  std::vector<std::string> stop;
  std::string error;  // non-empty: the request is invalid; the message names the line
};

struct Result {
  nlohmann::json id;
  std::string text;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::string finish_reason;  // "stop" | "length" | "error"
  std::string error;          // written only when finish_reason == "error"
};

}  // namespace tpllama
