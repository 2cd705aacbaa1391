// Structured outputs on rank 0: each request's OutputConstraint compiled once per distinct text
// (a dataset has one schema for a million lines) into a grammar, the vocabulary's TokenTrie built
// once, and the token mask of each grammar state memoized, since the sequences of a batch under one
// schema pass through the same states again and again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/run_metrics.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "io/request.h"
#include "text/tokenizer.h"

namespace tpllama {

// Figures for --stats and bench: how long masks took, how often the memo answered.
struct MaskStats {
  LatencyHistogram time;   // per mask asked for, memoized or walked
  long long computed = 0;  // of them walked on the trie (the rest memoized)
};

// MaskStats written from any thread.
class MaskRecorder {
 public:
  void add(double seconds, bool walked);
  MaskStats snapshot() const;

 private:
  mutable std::mutex mutex_;
  MaskStats stats_;
};

// One compiled constraint, shared by every sequence that asks for it.
class OutputGrammar {
 public:
  // stats (which may be null) must outlive it.
  OutputGrammar(grammar::Grammar g, const grammar::TokenTrie& trie, size_t memo_bytes,
                MaskRecorder* stats);

  const grammar::Grammar& grammar() const { return grammar_; }
  // The tokens the matcher may take next (no stop ids: the caller adds those where it may end).
  std::shared_ptr<const grammar::TokenMask> mask(const grammar::Matcher& m) const;
  // The memoized mask of where the matcher stands, or null (counted as a mask when found).
  std::shared_ptr<const grammar::TokenMask> memoized(const grammar::Matcher& m) const;

 private:
  // The memo's mask of a state key, or null.
  std::shared_ptr<const grammar::TokenMask> lookup(const std::string& key) const;

  grammar::Grammar grammar_;
  const grammar::TokenTrie& trie_;
  MaskRecorder* stats_;
  size_t memo_limit_;  // bytes the memo may hold (masks, keys, bookkeeping)
  mutable size_t memo_bytes_ = 0;
  mutable std::mutex mutex_;
  mutable std::list<std::string> order_;  // memo keys, oldest first
  mutable std::unordered_map<std::string, std::shared_ptr<const grammar::TokenMask>> memo_;
};

class OutputGrammars {
 public:
  // Compiled grammars kept (by constraint text), and the bytes of memoized masks per grammar.
  static constexpr size_t kMaxGrammars = 16;
  static constexpr size_t kMemoBytes = size_t{32} << 20;

  // The tokenizer's tokens as bytes (a control token has none: a grammar never allows it), for a
  // model of model_vocab ids (at least the tokenizer's: the ids past it, padding, have no bytes).
  OutputGrammars(const Tokenizer& tokenizer, int model_vocab);

  // The constraint compiled, from the cache or now; throws Error naming what is refused (an
  // unsupported schema keyword, a pattern's construct, a grammar's line, a limit).
  std::shared_ptr<const OutputGrammar> compile(const OutputConstraint& c);

  int vocab_size() const { return trie_->vocab_size(); }
  MaskStats stats() const { return stats_.snapshot(); }
  double compile_ms() const { return compile_ms_; }  // spent compiling, over the run
  size_t compiled() const { return compiled_; }  // constraints compiled or refused (cache misses)

 private:
  std::unique_ptr<grammar::TokenTrie> trie_;
  std::list<std::string> order_;  // cache keys, least recently used first
  struct Compiled {
    std::shared_ptr<const OutputGrammar> grammar;  // null: refused, for this reason
    std::string refusal;
  };
  std::unordered_map<std::string, Compiled> cache_;
  MaskRecorder stats_;
  double compile_ms_ = 0;
  size_t compiled_ = 0;
};

// The grammar of a constraint (uncached): what OutputGrammars::compile compiles.
grammar::Grammar compile_constraint(const OutputConstraint& c);

}  // namespace tpllama
