// The model's tokenizer, whichever file it comes from: a SentencePiece tokenizer.model or a Hugging
// Face tokenizer.json (byte-level BPE, text/hf_tokenizer.h); and a streaming detokenizer that hands
// out only complete UTF-8, decoding as the backend's own decode does (skipping special tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/utf8.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tpllama {

class HfTokenizer;

class Tokenizer {
 public:
  // A SentencePiece .model file, or a Hugging Face tokenizer.json when the path ends in ".json".
  // Throws Error naming the path and what is wrong (an unsupported tokenizer.json component).
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The tokenizer of a model directory: tokenizer.model when it is a SentencePiece model (loaded
  // once), else tokenizer.json. Throws Error naming the directory when it has neither (or only a
  // tokenizer.model that SentencePiece cannot read and no tokenizer.json).
  static std::unique_ptr<Tokenizer> from_model_dir(const std::string& model_dir);

  bool is_sentencepiece() const { return sp_ != nullptr; }
  const std::string& path() const { return path_; }

  // Ids of text, nothing added around them. SentencePiece encodes all of it as text; tokenizer.json
  // matches its added tokens first, as Hugging Face does by default.
  std::vector<int> encode(const std::string& text) const;
  // As encode, but a special token's text becomes its id with either backend (the rendered chat
  // prompt's "<s>" or "<|start_header_id|>"), as Hugging Face tokenizes a rendered template.
  std::vector<int> encode_with_special_tokens(const std::string& text) const;
  int vocab_size() const;

  // Bytes a token contributes to text: SentencePiece's '▁' → ' ', <0xNN> → the raw byte, control
  // tokens → "", unknown → " \xE2\x81\x87 "; tokenizer.json's decoder steps per token (ByteLevel,
  // ByteFallback, Replace), special tokens → "". Throws Error for ids out of range.
  std::string token_bytes(int id) const;
  // A control (SentencePiece) or special (tokenizer.json) token: no text of its own.
  bool is_control(int id) const;
  // The piece as the vocabulary spells it ("<s>", "▁the", "<0x0A>", "Ġthe", "<|eot_id|>").
  std::string piece(int id) const;
  // The model's BOS and EOS ids (-1 when it has none). tokenizer.json: the post-processor's first
  // prefix token, and -1 for EOS (config.json says which ids stop).
  int bos_id() const;
  int eos_id() const;
  // tokenizer.json's post-processor (TemplateProcessing): the ids it puts before and after a
  // prompt. SentencePiece models have none here (BOS follows tokenizer_config.json's
  // add_bos_token).
  std::vector<int> prefix_ids() const;
  std::vector<int> suffix_ids() const;

  // A lower bound on the tokens text encodes to (encode), from its bytes alone: far cheaper than
  // encoding, so that text too long for a context is refused without being tokenized. nullopt when
  // no bound holds: the normalizer may drop text (characters removed, unknown characters fused).
  std::optional<size_t> min_tokens(std::string_view text) const;

  // Full decode: what the streaming detokenizer gives for ids, flushed. Matches SentencePiece's
  // DecodeIds byte for byte (invalid or incomplete UTF-8 → U+FFFD per byte, unknown tokens as the
  // real U+2047 surface), and Hugging Face's decode(skip_special_tokens=True) (byte-level BPE:
  // U+FFFD per maximal ill-formed subpart, as Rust's from_utf8_lossy).
  std::string decode(const std::vector<int>& ids) const;

 private:
  enum class Kind : uint8_t { kNormal, kByte, kControl, kUnknown };
  // A SentencePiece model already loaded from path.
  Tokenizer(std::string path, std::unique_ptr<sentencepiece::SentencePieceProcessor> loaded);
  void check_id(int id) const;
  void load_sentencepiece();
  void load_hf();
  void measure_text_per_token();

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // one of these two
  std::unique_ptr<HfTokenizer> hf_;
  std::vector<std::string> bytes_;  // token_bytes for every id, built once: push() is per token
  std::vector<Kind> kinds_;
  std::unordered_map<std::string, int> specials_;  // control/special token text → id
  // Leading ' ' the decoder drops from the start of the text: SentencePiece drops the dummy prefix
  // of the first normal piece; tokenizer.json's Strip / Metaspace decoders drop up to this many.
  int strip_leading_spaces_ = 0;
  bool strip_normal_only_ = false;  // SentencePiece's rule: only a normal piece loses its space
  // Ill-formed UTF-8 in decoded text: U+FFFD per byte (SentencePiece, byte-fallback decoders) or
  // per maximal subpart (byte-level BPE, decoded by Hugging Face with from_utf8_lossy).
  bool lossy_per_byte_ = true;
  // min_tokens: the most input bytes one token can stand for, and how many times shorter the
  // backend's normalized text may be than its input (nullopt: without bound).
  size_t longest_token_text_ = 0;
  std::optional<double> max_shrink_;
  bool collapses_spaces_ = false;  // SentencePiece's remove_extra_whitespaces: a run of ' ' is one

  friend class IncrementalDetokenizer;
};

// A token's bytes as JSON text can hold them: the bytes themselves when they are valid UTF-8,
// else "bytes:" and each byte as \xNN (OpenAI's form for partial characters), so byte-fallback
// tokens stay distinct instead of all becoming U+FFFD.
std::string token_display_text(const std::string& bytes);

// Streaming decoder for one sequence: prime() with the prompt ids (their text is not returned),
// then push() generated ids one at a time; each call returns only newly complete UTF-8 text. A
// possibly valid incomplete trailing sequence is held back; bytes that can never become valid are
// emitted as U+FFFD each, as SentencePiece and Hugging Face do. Control (special) tokens add no
// text, unless skip_special_tokens is false: then each adds its piece ("<|eot_id|>"), with no
// space around it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok);
  // No tokenizer (benchmarks of token ids): every call returns "".
  explicit IncrementalDetokenizer(const Tokenizer* tok, bool skip_special_tokens = true)
      : tok_(tok), skip_special_(skip_special_tokens) {}

  void prime(const std::vector<int>& prompt_ids);
  std::string push(int id);
  // Whatever bytes remain; each byte of an incomplete trailing sequence becomes U+FFFD.
  std::string flush();

 private:
  utf8::Lossy lossy() const;

  const Tokenizer* tok_;
  bool skip_special_ = true;
  std::string pending_;  // bytes of a possibly valid, still incomplete UTF-8 character
  // Of pending_, the prompt's (prime): if generated bytes do not complete their character they are
  // dropped, not shown as U+FFFD in the completion's text.
  size_t prompt_pending_ = 0;
  int stripped_ = 0;      // leading spaces dropped so far (strip_leading_spaces_)
  bool at_start_ = true;  // no text produced yet, so a leading space may still be dropped
};

}  // namespace tpllama
