// Matcher: where a text stands in a Grammar after the bytes fed so far — the set of parse stacks
// (positions in the grammar, innermost last) that each expect a byte next, or have ended. A rule
// called last in an alternative replaces its caller's frame (a tail call), so a repetition does
// not deepen the stacks. The set is bounded: a grammar so ambiguous that more stacks live at
// once is an error, not a slow request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace tpllama::grammar {

class Matcher {
 public:
  static constexpr size_t kMaxStacks = 4096;

  // At the start of the grammar's root rule. The grammar must outlive the matcher.
  explicit Matcher(const Grammar& g, size_t max_stacks = kMaxStacks);

  // Takes one more byte; false (the state unchanged) when the grammar allows no such byte here.
  bool advance(uint8_t b);
  // Takes every byte of `bytes`, or none of them (false) when one is not allowed.
  bool advance(std::string_view bytes);
  // Whether the text so far is a whole sentence of the grammar (it may end here).
  bool can_end() const;
  // Whether any byte may follow.
  bool can_continue() const;
  // Whether these bytes could follow (the state unchanged).
  bool accepts(std::string_view bytes) const;

  // Where the matcher stands, and where it would stand after one more byte (empty: not
  // allowed), for walks over many continuations (TokenTrie) without copying the matcher.
  using Stack = std::vector<uint32_t>;
  using State = std::vector<Stack>;
  const State& state() const { return stacks_; }
  State next(const State& from, uint8_t b) const { return step(from, b); }

 private:
  // The stacks `s` stands for once every rule reference at its top is entered: each with a byte
  // set on top, or empty (the root ended); appended to out.
  void expand(Stack s, std::vector<Stack>& out) const;
  std::vector<Stack> step(const std::vector<Stack>& from, uint8_t b) const;

  const Grammar* g_;
  size_t max_stacks_;
  std::vector<Stack> stacks_;  // sorted, no two alike
};

}  // namespace tpllama::grammar
