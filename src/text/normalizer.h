// tokenizer.json's "normalizer": the rewrites applied to each stretch of text between added tokens
// before it is split into words: Prepend, Replace, NFC, and Sequences of them. Others are refused.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"
#include "text/hf_regex.h"

namespace tpllama::hf {

class Normalizer {
 public:
  Normalizer() = default;
  // j is the "normalizer" value (null for none); where names it in messages.
  Normalizer(const Json& j, const std::string& where);

  bool empty() const { return steps_.empty(); }
  // How many times shorter than its input the output may be; nullopt when text may vanish (a
  // Replace with no content, or with a regex that may match any length).
  std::optional<double> max_shrink() const;

  // text (valid UTF-8) normalized. Not thread-safe: a Replace regex reuses its match data. Throws
  // EncodeError when the text would grow past max_output_bytes of its size (a Replace with a long
  // content on a text of many matches), or a regex gives up on it.
  std::string apply(std::string_view text) const;

  // Real normalizers grow text a few times at most (' ' to '▁' is 1 byte to 3, then a prepended
  // '▁'); these bound what one text may cost, whatever the file asks.
  static constexpr size_t kMaxGrowth = 16;
  static constexpr size_t kGrowthSlack = 4096;
  static size_t max_output_bytes(size_t input_bytes) {
    return kMaxGrowth * input_bytes + kGrowthSlack;
  }

 private:
  enum class Kind { kPrepend, kReplace, kNfc };
  struct Step {
    Kind kind;
    std::string text;              // Prepend: what to put in front; Replace: the replacement
    std::vector<Pattern> pattern;  // Replace: one pattern (a vector: Pattern has no empty state)
  };

  void add(const Json& j, const std::string& where);

  std::vector<Step> steps_;
};

}  // namespace tpllama::hf
