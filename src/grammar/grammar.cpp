// Building a byte grammar: rules, repetitions, the size limits and the left-recursion check.
#include "grammar/grammar.h"

#include <utility>

#include "core/error.h"

namespace tpllama::grammar {

void ByteSet::add_range(uint8_t first, uint8_t last) {
  for (int b = first; b <= last; ++b) add(static_cast<uint8_t>(b));
}

void ByteSet::add(const ByteSet& other) {
  for (size_t i = 0; i < bits_.size(); ++i) bits_[i] |= other.bits_[i];
}

uint32_t GrammarBuilder::rule(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<uint32_t>(i);
  if (names_.size() >= limits_.max_rules)
    fail("the grammar has more than ", limits_.max_rules, " rules");
  names_.push_back(name);
  rules_.emplace_back();
  return static_cast<uint32_t>(names_.size() - 1);
}

uint32_t GrammarBuilder::fresh_rule(const std::string& hint) {
  return rule(hint + "#" + std::to_string(names_.size()));
}

void GrammarBuilder::count(size_t n) {
  elements_ += n;
  if (elements_ > limits_.max_elements)
    fail("the grammar has more than ", limits_.max_elements,
         " symbols (a repetition count or a schema too large)");
}

void GrammarBuilder::add_alternative(uint32_t rule, Sequence sequence) {
  count(sequence.size() + 1);
  rules_.at(rule).push_back(std::move(sequence));
}

GrammarBuilder::Symbol GrammarBuilder::bytes(const ByteSet& set) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == set) return {false, static_cast<uint32_t>(i)};
  sets_.push_back(set);
  return {false, static_cast<uint32_t>(sets_.size() - 1)};
}

GrammarBuilder::Symbol GrammarBuilder::byte(uint8_t b) {
  ByteSet set;
  set.add(b);
  return bytes(set);
}

GrammarBuilder::Sequence GrammarBuilder::literal(const std::string& text) {
  Sequence s;
  for (const char c : text) s.push_back(byte(static_cast<uint8_t>(c)));
  return s;
}

// item{min,max}: min copies, then either item* (a rule S := item S | ε) or max - min nested
// optional copies (O := item O' | ε), which match each count one way only.
GrammarBuilder::Symbol GrammarBuilder::repeat(const Sequence& item, int min, int max,
                                              const std::string& hint) {
  TPLLAMA_CHECK(min >= 0 && (max < 0 || max >= min), "repeat {", min, ",", max, "}");
  count(item.size() * static_cast<size_t>(max < 0 ? min + 1 : max));
  Sequence tail;
  if (max < 0) {
    const uint32_t star = fresh_rule(hint + "*");
    Sequence again = item;
    again.push_back(ref(star));
    add_alternative(star, std::move(again));
    add_alternative(star, {});
    tail.push_back(ref(star));
  } else if (max > min) {
    uint32_t inner = 0;
    for (int k = 0; k < max - min; ++k) {
      const uint32_t optional = fresh_rule(hint + "?");
      Sequence more = item;
      if (k > 0) more.push_back(ref(inner));
      add_alternative(optional, std::move(more));
      add_alternative(optional, {});
      inner = optional;
    }
    tail.push_back(ref(inner));
  }
  const uint32_t whole = fresh_rule(hint);
  Sequence all;
  for (int k = 0; k < min; ++k) all.insert(all.end(), item.begin(), item.end());
  all.insert(all.end(), tail.begin(), tail.end());
  add_alternative(whole, std::move(all));
  return ref(whole);
}

Grammar GrammarBuilder::build(uint32_t root) const {
  const size_t n = rules_.size();
  TPLLAMA_CHECK(root < n, "grammar root ", root, " of ", n, " rules");
  for (size_t r = 0; r < n; ++r)
    if (rules_[r].empty()) fail("grammar rule '", names_[r], "' is used but never defined");
  // Nullable rules (they can match no byte), to a fixed point.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& alt : rules_[r]) {
        bool all = true;
        for (const Symbol& s : alt) all = all && s.is_rule && nullable[s.index];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // The rules each rule may start with (before any byte is read), and whether that call is the
  // last of its alternative (a tail call, which replaces the caller's frame).
  struct Edge {
    uint32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (size_t r = 0; r < n; ++r)
    for (const Sequence& alt : rules_[r])
      for (size_t i = 0; i < alt.size(); ++i) {
        if (!alt[i].is_rule) break;
        edges[r].push_back({alt[i].index, i + 1 == alt.size()});
        if (!nullable[alt[i].index]) break;
      }
  // A loop of such calls expands forever unless every call in it is a tail call (then the
  // stack comes back the same, and the matcher's expansion stops there): the strongly connected
  // components of the call graph (Kosaraju, with explicit stacks) must hold no other call.
  std::vector<std::vector<uint32_t>> reverse(n);
  for (size_t r = 0; r < n; ++r)
    for (const Edge& e : edges[r]) reverse[e.to].push_back(static_cast<uint32_t>(r));
  std::vector<uint32_t> order;
  std::vector<bool> seen(n, false);
  for (size_t start = 0; start < n; ++start) {
    if (seen[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
    seen[start] = true;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next < edges[r].size()) {
        const uint32_t to = edges[r][next++].to;
        if (!seen[to]) {
          seen[to] = true;
          path.emplace_back(to, 0);
        }
        continue;
      }
      order.push_back(r);
      path.pop_back();
    }
  }
  std::vector<int> component(n, -1);
  int components = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (component[*it] >= 0) continue;
    std::vector<uint32_t> todo{*it};
    component[*it] = components;
    while (!todo.empty()) {
      const uint32_t r = todo.back();
      todo.pop_back();
      for (const uint32_t from : reverse[r])
        if (component[from] < 0) {
          component[from] = components;
          todo.push_back(from);
        }
    }
    ++components;
  }
  for (size_t r = 0; r < n; ++r)
    for (const Edge& e : edges[r])
      if (!e.tail && component[e.to] == component[r]) {
        // Named by the first rule of the loop a grammar's author named (not a repetition's or a
        // group's own rule, whose names carry a '#').
        uint32_t named = e.to;
        for (uint32_t q = 0; q < n; ++q)
          if (component[q] == component[e.to] && names_[q].find('#') == std::string::npos) {
            named = q;
            break;
          }
        fail("grammar rule '", names_[named],
             "' is left-recursive (it can reach itself before matching a byte)");
      }

  Grammar g;
  g.sets = sets_;
  g.names = names_;
  g.root = root;
  g.alternatives.resize(n);
  for (size_t r = 0; r < n; ++r)
    for (const Sequence& alt : rules_[r]) {
      g.alternatives[r].push_back(static_cast<uint32_t>(g.elements.size()));
      for (const Symbol& s : alt)
        g.elements.push_back(s.is_rule ? s.index | Grammar::kRuleFlag : s.index);
      g.elements.push_back(Grammar::kEnd);
    }
  return g;
}

}  // namespace tpllama::grammar
