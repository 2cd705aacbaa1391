// BPE: the vocabulary and merges read from tokenizer.json, and a word's symbols merged by rank.
#include "text/bpe_model.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/utf8.h"
#include "text/byte_level.h"

namespace tpllama::hf {
namespace {

constexpr size_t kCacheEntries = size_t{1} << 16;
constexpr size_t kMaxCachedWordBytes = 256;
// Up to this many symbols a linear scan for the best pair beats keeping a heap.
constexpr size_t kScanMaxSymbols = 64;

uint64_t pair_key(int left, int right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

void PairMap::reserve(size_t n) {
  size_t capacity = 16;
  while (capacity < 2 * n) capacity <<= 1;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(capacity, Slot{kEmpty, {0, 0}});
  mask_ = capacity - 1;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) insert(static_cast<int>(s.key >> 32), static_cast<int>(s.key), s.merge);
  }
}

size_t PairMap::slot_of(uint64_t key) const {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing: neighbouring ids spread out
  size_t i = static_cast<size_t>(h ^ (h >> 32)) & mask_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  return i;
}

void PairMap::insert(int left, int right, Merge m) {
  if (2 * (size_ + 1) > slots_.size()) reserve(size_ + 1);
  uint64_t key = pair_key(left, right);
  Slot& s = slots_[slot_of(key)];
  if (s.key == kEmpty) ++size_;
  s = Slot{key, m};
}

const PairMap::Merge* PairMap::find(int left, int right) const {
  if (slots_.empty()) return nullptr;
  const Slot& s = slots_[slot_of(pair_key(left, right))];
  return s.key == kEmpty ? nullptr : &s.merge;
}

BpeModel::BpeModel(const Json& j, bool byte_level, const std::string& where)
    : byte_level_(byte_level) {
  std::string type = type_of(j, where);
  if (type != "BPE") refuse_type(where, type, "BPE");
  auto dropout = j.find("dropout");
  if (dropout != j.end() && !dropout->is_null() && !(dropout->is_number() && *dropout == 0)) {
    fail(where, ": BPE dropout ", dropout->dump(), " is not supported (inference uses none)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string v = opt_string(j, key, "", where);
    if (!v.empty()) fail(where, ": BPE ", key, " '", v, "' is not supported");
  }
  byte_fallback_ = opt_bool(j, "byte_fallback", false, where);
  ignore_merges_ = opt_bool(j, "ignore_merges", false, where);
  fuse_unk_ = opt_bool(j, "fuse_unk", false, where);

  read_vocab(member(j, "vocab", where), where);
  std::string unk = opt_string(j, "unk_token", "", where);
  if (!unk.empty()) {
    auto id = id_of(unk);
    if (!id) fail(where, ": unk_token '", unk, "' is not in the vocab");
    unk_id_ = *id;
  }
  read_merges(req_array(j, "merges", where), where);

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_token_[b] = id_of(name).value_or(-1);
    std::string spelling = byte_level_ ? byte_to_char(static_cast<unsigned char>(b))
                                       : std::string(1, static_cast<char>(b));
    initial_[b] = byte_level_ || b < 0x80 ? id_of(spelling).value_or(-1) : -1;
  }
}

void BpeModel::read_vocab(const Json& vocab, const std::string& where) {
  if (!vocab.is_object()) fail(where, ": vocab is ", json_kind(vocab), ", expected an object");
  ids_.reserve(vocab.size());
  int max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer() || it->get<long long>() < 0 || it->get<long long>() > INT_MAX) {
      fail(where, ": vocab entry '", it.key(), "' has id ", it->dump(),
           ", expected an integer >= 0");
    }
    int id = it->get<int>();
    ids_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  pieces_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [spelling, id] : ids_) pieces_[id] = spelling;
  if (!byte_level_) return;
  byte_words_.reserve(ids_.size());
  std::string bytes;
  for (const auto& [spelling, id] : ids_) {
    bytes.clear();
    // A spelling outside the byte-level alphabet can never come out of byte-level words.
    if (byte_level_decode(spelling, bytes)) byte_words_.emplace(bytes, id);
  }
}

void BpeModel::read_merges(const Json& merges, const std::string& where) {
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos) fail(where, ": merges[", i, "] '", s, "' has no space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail(where, ": merges[", i, "] is ", m.dump(), ", expected \"a b\" or [\"a\", \"b\"]");
    }
    std::string joined = left + right;
    for (const std::string* s : {&left, &right, &joined}) {
      if (!ids_.count(*s))
        fail(where, ": merges[", i, "] needs '", *s, "', which is not in the vocab");
    }
    merges_.insert(ids_.find(left)->second, ids_.find(right)->second,
                   {static_cast<int>(i), ids_.find(joined)->second});
  }
}

std::optional<int> BpeModel::id_of(std::string_view spelling) const {
  auto it = ids_.find(spelling);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const StringMap<int>& whole = byte_level_ ? byte_words_ : ids_;
    auto it = whole.find(word);
    if (it != whole.end()) {
      out.push_back(it->second);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  symbols_.clear();
  initial_symbols(word, symbols_);
  if (symbols_.size() <= kScanMaxSymbols) {
    merge_by_scan(symbols_);
  } else {
    merge_by_heap(symbols_);
  }
  out.insert(out.end(), symbols_.begin(), symbols_.end());
  if (cacheable) {
    if (cache_.size() >= kCacheEntries) cache_.clear();  // crude, but adapts to a new text's words
    cache_.emplace(std::string(word), symbols_);
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int>& symbols) const {
  // As Hugging Face: a run of unknown characters is held back (fused into one unk when fuse_unk)
  // and written when a known character comes; byte-fallback tokens do not flush it.
  int pending_unk = -1;
  auto add = [&](int id, std::string_view spelling) {
    if (id >= 0) {
      if (pending_unk >= 0) symbols.push_back(pending_unk);
      pending_unk = -1;
      symbols.push_back(id);
      return;
    }
    if (byte_fallback_ && std::all_of(spelling.begin(), spelling.end(), [&](char c) {
          return byte_token_[static_cast<unsigned char>(c)] >= 0;
        })) {
      for (char c : spelling) symbols.push_back(byte_token_[static_cast<unsigned char>(c)]);
      return;
    }
    if (unk_id_ < 0) return;  // no unk token: Hugging Face drops the character
    if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
    pending_unk = unk_id_;
  };
  if (byte_level_) {
    for (char c : word) {
      auto b = static_cast<unsigned char>(c);
      add(initial_[b], byte_to_char(b));
    }
  } else {
    size_t i = 0;
    while (i < word.size()) {
      auto b = static_cast<unsigned char>(word[i]);
      if (b < 0x80) {
        add(initial_[b], word.substr(i, 1));
        ++i;
        continue;
      }
      size_t n = std::max<size_t>(utf8::valid_length(word, i), 1);
      std::string_view ch = word.substr(i, n);
      add(id_of(ch).value_or(-1), ch);
      i += n;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

// Merges the lowest-ranked adjacent pair, the leftmost on a tie, until none has a merge: the
// order Hugging Face's heap gives.
void BpeModel::merge_by_scan(std::vector<int>& symbols) const {
  if (symbols.size() < 2) return;
  // rank[i], merged[i]: the merge of symbols i and i+1, if any.
  int rank[kScanMaxSymbols];
  int merged[kScanMaxSymbols];
  size_t n = symbols.size();
  auto look = [&](size_t i) {
    const PairMap::Merge* m = merges_.find(symbols[i], symbols[i + 1]);
    rank[i] = m ? m->rank : INT_MAX;
    merged[i] = m ? m->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n >= 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == INT_MAX) break;
    symbols[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      symbols[i] = symbols[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  symbols.resize(n);
}

void BpeModel::merge_by_heap(std::vector<int>& symbols) const {
  struct Candidate {
    int rank;
    int pos;
    int merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  int n = static_cast<int>(symbols.size());
  std::vector<int> prev(n), next(n);
  std::vector<Candidate> heap;
  heap.reserve(n);
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] >= n) return;
    if (const PairMap::Merge* m = merges_.find(symbols[pos], symbols[next[pos]])) {
      heap.push_back({m->rank, pos, m->merged});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    Candidate c = heap.back();
    heap.pop_back();
    // Skip a candidate whose symbols have changed since it was queued.
    if (symbols[c.pos] < 0 || next[c.pos] >= n) continue;
    const PairMap::Merge* m = merges_.find(symbols[c.pos], symbols[next[c.pos]]);
    if (!m || m->merged != c.merged) continue;
    int right = next[c.pos];
    symbols[c.pos] = c.merged;
    symbols[right] = -1;
    next[c.pos] = next[right];
    if (next[right] < n) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  symbols.erase(std::remove(symbols.begin(), symbols.end(), -1), symbols.end());
}

bool BpeModel::may_drop_text() const {
  if (unk_id_ >= 0) return fuse_unk_;
  const int* spelled = byte_level_ ? initial_ : byte_fallback_ ? byte_token_ : nullptr;
  if (spelled == nullptr) return true;  // a character outside the vocabulary is dropped
  return std::any_of(spelled, spelled + 256, [](int id) { return id < 0; });
}

}  // namespace tpllama::hf
