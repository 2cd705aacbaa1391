// tokenizer.json's "model" of type BPE: the vocabulary, the ranked merges and the merge loop that
// turns one word into ids, with byte_fallback, ignore_merges, unk_token and fuse_unk as Hugging
// Face applies them. Dropout and subword prefixes/suffixes are refused at load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/hf_json.h"

namespace tpllama::hf {

// Transparent hashing, so string_view lookups need no temporary std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Merges keyed by the pair of ids they join: open addressing, as the lookup is BPE's inner loop.
class PairMap {
 public:
  struct Merge {
    int rank;
    int merged;
  };
  void reserve(size_t n);
  void insert(int left, int right, Merge m);  // a later merge of the same pair replaces it
  const Merge* find(int left, int right) const;
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot_of(uint64_t key) const;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

class BpeModel {
 public:
  // j is the "model" object. byte_level: words arrive as raw bytes (a ByteLevel pre-tokenizer
  // ends the chain) and each byte stands for its character of the byte-level alphabet.
  BpeModel(const Json& j, bool byte_level, const std::string& where);

  // Appends the ids of one word. Not thread-safe: it keeps a bounded cache of recent words.
  void encode_word(std::string_view word, std::vector<int>& out) const;

  std::optional<int> id_of(std::string_view spelling) const;

  // Whether text can vanish: characters the vocabulary cannot spell dropped (no unk token, no byte
  // for them), or a run of them, however long, fused into one unk token.
  bool may_drop_text() const;
  // Spellings by id; ids the vocabulary skips are "".
  const std::vector<std::string>& pieces() const { return pieces_; }

 private:
  void read_vocab(const Json& vocab, const std::string& where);
  void read_merges(const Json& merges, const std::string& where);
  void initial_symbols(std::string_view word, std::vector<int>& symbols) const;
  void merge_by_scan(std::vector<int>& symbols) const;
  void merge_by_heap(std::vector<int>& symbols) const;

  std::vector<std::string> pieces_;
  StringMap<int> ids_;         // spelling -> id
  StringMap<int> byte_words_;  // byte_level: the bytes a spelling stands for -> id
  PairMap merges_;
  int initial_[256];     // byte_level: id of each byte; else id of each ASCII character
  int byte_token_[256];  // id of "<0xNN>", or -1
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  int unk_id_ = -1;

  mutable StringMap<std::vector<int>> cache_;
  mutable std::vector<int> symbols_;  // scratch for one word
};

}  // namespace tpllama::hf
