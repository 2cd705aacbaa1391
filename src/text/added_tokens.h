// tokenizer.json's "added_tokens": strings found in the text before anything else runs, each
// becoming its one id (Llama 3's <|eot_id|>), matched leftmost-longest as Hugging Face's
// Aho-Corasick does, with its single_word, lstrip and rstrip rules.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"

namespace tpllama::hf {

class Normalizer;

struct AddedToken {
  int id = -1;
  std::string content;
  bool single_word = false;  // only where no word character touches it on either side
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool normalized = false;   // matched in normalized text rather than in the raw input
  bool special = false;
};

// A stretch of the text: an added token (id >= 0) or text for the model (id < 0).
struct Segment {
  size_t begin = 0;
  size_t end = 0;
  int id = -1;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // list is the "added_tokens" array (null or absent: none). Tokens marked normalized are matched
  // as the normalizer spells them, as Hugging Face does.
  AddedTokens(const Json& list, const Normalizer& normalizer, const std::string& where);

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool has_normalized() const { return !normalized_.nodes.empty(); }

  // Cuts text into segments with the tokens matched in raw text, or (normalized = true) with those
  // matched in normalized text. Segments cover text; empty text stretches are left out.
  void split(std::string_view text, bool normalized, std::vector<Segment>& out) const;

 private:
  // A byte trie of token contents; a node's token is an index into tokens_, or -1.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int>> children;
      int token = -1;
    };
    std::vector<Node> nodes;
    std::array<bool, 256> first{};  // bytes a content can start with
    void add(std::string_view content, int token);
    // The longest content starting at text[at]: its token and length, or token -1.
    std::pair<int, size_t> longest_at(std::string_view text, size_t at) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace tpllama::hf
