// TokenTrie: a vocabulary as a trie of its tokens' bytes, so that the tokens a grammar allows next
// are found in one walk in which a prefix shared by many tokens is matched once (a grammar that
// refuses a byte prunes every token below it), and each matcher state's move on a byte is computed
// once per walk. The mask is a bitmask by token id, the form the
// vocabulary-parallel head takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace tpllama::grammar {

// Bit t of the mask (word t / 32, bit t % 32) allows token t.
using TokenMask = std::vector<uint32_t>;

inline bool allows(const TokenMask& mask, int token) {
  return (mask[static_cast<size_t>(token) >> 5] >> (token & 31)) & 1;
}

class TokenTrie {
 public:
  // bytes[id] is token id's bytes; a token with none (a control token, padding) is never allowed
  // by a grammar (the caller decides on end-of-sequence tokens).
  explicit TokenTrie(const std::vector<std::string>& bytes);

  int vocab_size() const { return vocab_; }
  size_t nodes() const { return first_child_.size(); }

  // The tokens whose every byte the matcher can take from where it stands.
  TokenMask allowed(const Matcher& m) const;

 private:
  // Node n: its byte (the edge into it), its children [first_child, first_child + n_children),
  // and its tokens [first_token, first_token + n_tokens) in token_ids_. Node 0 is the root.
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> first_child_, n_children_, first_token_, n_tokens_;
  std::vector<int32_t> token_ids_;
  int vocab_ = 0;
};

}  // namespace tpllama::grammar
