// The vocabulary trie, built level by level from the sorted token bytes, and the masks walked on
// it.
#include "grammar/token_mask.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

namespace tpllama::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& bytes)
    : vocab_(static_cast<int>(bytes.size())) {
  // Token ids by their bytes: a node is a range of this order sharing a prefix.
  std::vector<int32_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  size_t skip = 0;  // tokens with no bytes sort first and belong to no node
  while (skip < order.size() && bytes[order[skip]].empty()) ++skip;
  // Breadth first: each node is the range [lo, hi) of order and its depth.
  struct Range {
    size_t lo, hi, depth;
  };
  std::vector<Range> ranges{{skip, order.size(), 0}};
  byte_.push_back(0);
  for (size_t n = 0; n < ranges.size(); ++n) {
    const auto [lo, hi, depth] = ranges[n];
    size_t i = lo;
    first_token_.push_back(static_cast<uint32_t>(token_ids_.size()));
    while (i < hi && bytes[order[i]].size() == depth) token_ids_.push_back(order[i++]);
    n_tokens_.push_back(static_cast<uint32_t>(token_ids_.size()) - first_token_.back());
    first_child_.push_back(static_cast<uint32_t>(ranges.size()));
    while (i < hi) {  // the children: runs of one byte at this depth
      const auto b = static_cast<uint8_t>(bytes[order[i]][depth]);
      size_t j = i;
      while (j < hi && static_cast<uint8_t>(bytes[order[j]][depth]) == b) ++j;
      ranges.push_back({i, j, depth + 1});
      byte_.push_back(b);
      i = j;
    }
    n_children_.push_back(static_cast<uint32_t>(ranges.size()) - first_child_.back());
  }
}

TokenMask TokenTrie::allowed(const Matcher& m) const {
  TokenMask mask((static_cast<size_t>(vocab_) + 31) / 32, 0);
  // The matcher's states met in this walk, numbered, and each one's moves by byte: a short list
  // first, a 256-entry table once a state has many (inside a string most bytes lead back to the
  // state they left, so most nodes cost one lookup, and a state met once costs a few bytes).
  constexpr int32_t kUnknown = -2, kRefused = -1;
  constexpr size_t kFewMoves = 8;
  struct Moves {
    std::vector<std::pair<uint8_t, int32_t>> few;
    std::unique_ptr<std::array<int32_t, 256>> table;
  };
  std::map<Matcher::State, int32_t> ids;
  std::vector<const Matcher::State*> states;
  std::vector<Moves> moves;
  const auto intern = [&](Matcher::State s) {
    auto [it, fresh] = ids.emplace(std::move(s), static_cast<int32_t>(states.size()));
    if (fresh) {
      states.push_back(&it->first);
      moves.emplace_back();
    }
    return it->second;
  };
  const auto known = [&](const Moves& from, uint8_t b) {
    if (from.table) return (*from.table)[b];
    for (const auto& [byte, to] : from.few)
      if (byte == b) return to;
    return kUnknown;
  };
  const auto move = [&](int32_t from, uint8_t b) {
    int32_t to = known(moves[static_cast<size_t>(from)], b);
    if (to != kUnknown) return to;
    Matcher::State after = m.next(*states[static_cast<size_t>(from)], b);
    to = after.empty() ? kRefused : intern(std::move(after));
    Moves& at = moves[static_cast<size_t>(from)];  // after intern, which may grow `moves`
    if (at.table) {
      (*at.table)[b] = to;
    } else if (at.few.size() < kFewMoves) {
      at.few.emplace_back(b, to);
    } else {
      at.table = std::make_unique<std::array<int32_t, 256>>();
      at.table->fill(kUnknown);
      for (const auto& [byte, t] : at.few) (*at.table)[byte] = t;
      (*at.table)[b] = to;
      at.few.clear();
    }
    return to;
  };
  // Depth first, each node with the state before its byte.
  std::vector<std::pair<uint32_t, int32_t>> todo;
  const int32_t start = intern(m.state());
  for (uint32_t c = 0; c < n_children_[0]; ++c) todo.emplace_back(first_child_[0] + c, start);
  while (!todo.empty()) {
    const auto [node, before] = todo.back();
    todo.pop_back();
    const int32_t after = move(before, byte_[node]);
    if (after < 0) continue;  // no token below this node can be taken
    for (uint32_t k = 0; k < n_tokens_[node]; ++k) {
      const auto t = static_cast<uint32_t>(token_ids_[first_token_[node] + k]);
      mask[t >> 5] |= uint32_t{1} << (t & 31);
    }
    for (uint32_t c = 0; c < n_children_[node]; ++c)
      todo.emplace_back(first_child_[node] + c, after);
  }
  return mask;
}

}  // namespace tpllama::grammar
