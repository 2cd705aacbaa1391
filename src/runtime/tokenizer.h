// SentencePiece tokenizer wrapper plus a streaming detokenizer that hands out only complete UTF-8,
// decoding exactly as SentencePiece's DecodeIds does (leading-space rule, byte fallback, U+FFFD).
#pragma once

#include <sentencepiece_processor.h>  // processor() is public API, so callers need the full type

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpllama {

class Tokenizer {
 public:
  // Loads a SentencePiece .model; throws Error naming the path and SentencePiece's status message.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // SentencePiece encoding of text, no BOS/EOS added (the caller prepends BOS).
  std::vector<int> encode(const std::string& text) const;
  int vocab_size() const;

  // Bytes a token contributes to text: '▁' → ' ' for normal pieces, <0xNN> → the raw byte,
  // control tokens → "", unknown → " \xE2\x81\x87 ". Throws Error for ids out of range.
  std::string token_bytes(int id) const;
  bool is_control(int id) const;
  bool is_byte(int id) const;
  bool is_unknown(int id) const;

  // Full decode matching SentencePiece's DecodeIds byte for byte (invalid or incomplete UTF-8 →
  // U+FFFD per byte), except that unknown tokens always use the real U+2047 surface above.
  std::string decode(const std::vector<int>& ids) const;

  const sentencepiece::SentencePieceProcessor& processor() const;

 private:
  enum class Kind : uint8_t { kNormal, kByte, kControl, kUnknown };
  void check_id(int id) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::vector<std::string> bytes_;  // token_bytes for every id, built once: push() is per token
  std::vector<Kind> kinds_;

  friend class IncrementalDetokenizer;
};

// A token's bytes as JSON text can hold them: the bytes themselves when they are valid UTF-8,
// else "bytes:" and each byte as \xNN (OpenAI's form for partial characters), so byte-fallback
// tokens stay distinct instead of all becoming U+FFFD.
std::string token_display_text(const std::string& bytes);

// Streaming decoder for one sequence: prime() with the prompt ids (their text is not returned),
// then push() generated ids one at a time; each call returns only newly complete UTF-8 text. A
// possibly valid incomplete trailing sequence is held back; bytes that can never become valid are
// emitted as U+FFFD each, as SentencePiece does.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok);
  // No tokenizer (benchmarks of token ids): every call returns "".
  explicit IncrementalDetokenizer(const Tokenizer* tok) : tok_(tok) {}

  void prime(const std::vector<int>& prompt_ids);
  std::string push(int id);
  // Whatever bytes remain; each byte of an incomplete trailing sequence becomes U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tok_;
  std::string pending_;   // bytes of a possibly valid, still incomplete UTF-8 character
  bool at_start_ = true;  // no text produced yet, so the next '▁'-led piece loses its space
};

}  // namespace tpllama
