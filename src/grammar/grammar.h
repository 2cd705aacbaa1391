// A context-free grammar over bytes, the form every constraint compiles to (a regex, a GBNF
// grammar, later a JSON Schema): rules of alternatives, each a sequence of byte sets and rule
// references. Text is matched as UTF-8 bytes, so a token's bytes are fed as they are (a
// byte-fallback piece of a character included). Built through GrammarBuilder, which bounds its
// size and refuses left recursion (the matcher walks rules top-down).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpllama::grammar {

// A set of byte values.
class ByteSet {
 public:
  void add(uint8_t b) { bits_[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t first, uint8_t last);
  void add(const ByteSet& other);
  bool has(uint8_t b) const { return (bits_[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  bool operator==(const ByteSet& o) const { return bits_ == o.bits_; }

 private:
  std::array<uint64_t, 4> bits_{};
};

// The grammar as the matcher walks it: every alternative of every rule laid out in `elements`,
// each ending with kEnd. A position is an index into `elements`.
struct Grammar {
  static constexpr uint32_t kEnd = 0xFFFFFFFF;
  static constexpr uint32_t kRuleFlag = 0x80000000;  // set: a rule reference, else a byte set
  std::vector<uint32_t> elements;                    // byte-set index, rule | kRuleFlag, or kEnd
  std::vector<ByteSet> sets;
  std::vector<std::vector<uint32_t>> alternatives;  // by rule: the position of each alternative
  std::vector<std::string> names;                   // by rule, for messages
  uint32_t root = 0;
};

// Limits a grammar from a request must stay within (a hostile one is refused, not run).
struct GrammarLimits {
  size_t max_elements = 1 << 20;  // symbols over all alternatives
  size_t max_rules = 1 << 16;
};

// A grammar under construction: rules are declared (by name, or fresh for a repetition), then
// given their alternatives. build() checks that every rule has alternatives, that the sizes stay
// within the limits and that no rule can reach itself without consuming a byte.
class GrammarBuilder {
 public:
  // One element of an alternative.
  struct Symbol {
    bool is_rule = false;
    uint32_t index = 0;  // rule id, or byte-set id
  };
  using Sequence = std::vector<Symbol>;

  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  // The rule of this name, declared on first use.
  uint32_t rule(const std::string& name);
  // A rule with a name of its own (a group, a repetition).
  uint32_t fresh_rule(const std::string& hint);
  void add_alternative(uint32_t rule, Sequence sequence);
  Symbol bytes(const ByteSet& set);
  Symbol byte(uint8_t b);
  static Symbol ref(uint32_t rule) { return {true, rule}; }
  // Sequences matching `item` repeated min..max times (max < 0: unbounded), as a rule.
  Symbol repeat(const Sequence& item, int min, int max, const std::string& hint);
  // A sequence of the bytes of `text`.
  Sequence literal(const std::string& text);

  // The grammar rooted at `root`; throws Error naming the rule or limit on a bad grammar.
  Grammar build(uint32_t root) const;

  size_t elements() const { return elements_; }

 private:
  void count(size_t n);

  GrammarLimits limits_;
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<ByteSet> sets_;
  size_t elements_ = 0;
};

}  // namespace tpllama::grammar
