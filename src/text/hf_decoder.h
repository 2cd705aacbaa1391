// tokenizer.json's "decoder", reduced to what each id contributes to decoded text (its spelling
// through the per-token steps: ByteLevel's map back to bytes, ByteFallback's <0xNN>, Replace,
// Metaspace) and how many leading spaces the whole text then loses (Strip after Fuse, Metaspace).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"
#include "text/hf_regex.h"

namespace tpllama::hf {

class Decoder {
 public:
  // The most bytes one token may decode to: a hostile Replace (a megabyte for every match) is
  // refused by name at load, not built for every token of the vocabulary.
  static constexpr size_t kMaxTokenBytes = 4096;

  Decoder() = default;
  // j is the "decoder" value (null: spellings are the text); where names it in messages.
  Decoder(const Json& j, const std::string& where);

  // The bytes piece contributes; *is_byte tells whether ByteFallback read it as one byte. Throws
  // Error naming the step when a Replace would make them more than kMaxTokenBytes. Not
  // thread-safe (a Replace regex reuses its match data): meant for building tables at load.
  std::string token_bytes(std::string_view piece, bool* is_byte) const;

  bool has_byte_fallback() const { return byte_fallback_; }
  int strip_leading_spaces() const { return strip_leading_spaces_; }

 private:
  enum class Kind { kByteLevel, kByteFallback, kReplace };
  struct Step {
    Kind kind;
    std::vector<Pattern> pattern;  // Replace (Metaspace becomes a Replace of its replacement)
    std::string content;
    std::string where;  // the step in the file, for messages
  };

  void add(const Json& j, const std::string& where);
  void add_strip(const Json& j, const std::string& where);

  std::vector<Step> steps_;
  bool joined_ = false;  // a Fuse or ByteLevel has made one string of the tokens
  bool byte_fallback_ = false;
  int strip_leading_spaces_ = 0;
};

// Whether piece is ByteFallback's "<0xNN>"; *byte receives NN.
bool parse_byte_token(std::string_view piece, unsigned char* byte);

}  // namespace tpllama::hf
