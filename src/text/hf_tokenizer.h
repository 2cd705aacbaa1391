// A Hugging Face tokenizer.json read natively: byte-level BPE (Llama 3) and SentencePiece-style BPE
// (Llama 2's tokenizer.json). Encodes text to ids and gives each id's decoded bytes; components
// outside that family (WordPiece, Unigram, Digits, NFKC, ...) are refused at load, by name.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpllama {

// Thread safety: every method may be called from several threads at once. encode() holds a lock
// for its whole call (it reuses a word cache and PCRE2 match data), so concurrent encodes run one
// after another; a caller wanting them in parallel keeps one HfTokenizer per thread.
class HfTokenizer {
 public:
  // Reads tokenizer.json; throws Error naming the path and any unsupported component.
  explicit HfTokenizer(const std::string& tokenizer_json_path);
  ~HfTokenizer();
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  // Ids of text: added tokens matched first, then normalizer -> pre-tokenizer -> BPE. No
  // post-processor tokens. Invalid UTF-8 is first repaired as Rust's from_utf8_lossy does (each
  // maximal invalid sequence becomes U+FFFD), since Hugging Face only ever sees valid strings.
  // Throws hf::EncodeError for a text past the file's patterns' or normalizer's bounds.
  std::vector<int> encode(const std::string& text) const;

  // 1 + the largest id of the vocab and the added tokens.
  int vocab_size() const;

  // What each id contributes to decoded text, the decoder's per-token steps applied (ByteLevel map
  // back, ByteFallback byte, Replace, Metaspace's replacement to ' '). Ids with no token, gaps or
  // out of range, give "". Bytes may be partial UTF-8: callers join ids before validating.
  const std::string& token_bytes(int id) const;

  // An added token with "special": true (skipped in decoded text, as vLLM's skip_special_tokens).
  bool is_special(int id) const;
  // A <0xNN> token under a ByteFallback decoder.
  bool is_byte(int id) const;
  bool has_token(int id) const;
  // The spelling in the vocabulary, or the added token's content ("" for no token).
  const std::string& piece(int id) const;
  // Lookup by spelling: an added token's content first, then the vocabulary.
  std::optional<int> token_id(const std::string& piece) const;

  // Leading ' ' characters the decoder strips from the start of the whole text (Strip's start
  // after Fuse, or 1 for a Metaspace decoder that prepends): 0 or 1 usually.
  int strip_leading_spaces() const;

  // How many times shorter than the input the text the model's words hold may be (the normalizer's
  // rewrites); nullopt when text may vanish: a normalizer that drops it, a Split that removes its
  // delimiters, an added token that takes the whitespace around it, unknown characters fused.
  std::optional<double> max_shrink() const;

  // TemplateProcessing `single`: the special-token ids before and after $A (empty when none).
  const std::vector<int>& prefix_ids() const;
  const std::vector<int>& suffix_ids() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpllama
