// StructuredOutputs: rank 0's structured outputs (vLLM v1's StructuredOutputManager) — each
// constrained sequence's cursor in its grammar (where its text stands, the mask of the tokens it
// takes next), the grammars compiled once per constraint text (OutputGrammars), and the threads
// that make a step's masks together: a persistent pool, started at the first step that needs it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/worker_pool.h"
#include "engine/output_grammar.h"
#include "engine/output_state.h"
#include "engine/sequence.h"
#include "grammar/matcher.h"
#include "model/step_batch.h"
#include "text/tokenizer.h"

namespace tpllama {

// The structured outputs of a run so far, for --stats and bench.
struct StructuredFigures {
  long long requests = 0;  // constrained
  long long grammars_compiled = 0;
  double compile_seconds = 0;
  MaskStats masks;
};

// How a grammar ends its sequence, where it does: kStop (its text is complete, or only a stop may
// follow) or kError, saying why.
struct GrammarEnd {
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

class StructuredOutputs {
 public:
  // tokenizer may be null (token-id requests): then no request may be constrained. model_vocab:
  // the logit rows' width (at least the tokenizer's vocabulary). rules: the stop ids a grammar
  // allows where it may end.
  StructuredOutputs(const Tokenizer* tokenizer, int model_vocab, StopRules rules);
  ~StructuredOutputs();

  // At intake: s's completion must be a sentence of c, from its start. "" when taken; else why not,
  // naming c's field (c refused by the compiler, a grammar that allows no token of the vocabulary
  // at its start or only an empty completion, a prompt of no text whose tokenizer drops the
  // completion's first space, no tokenizer).
  std::string constrain(const Sequence& s, const OutputConstraint& c);
  bool constrained(const Sequence& s) const { return cursors_.count(&s) != 0; }
  // A sample forked from a constrained sequence starts at the grammar's start.
  void fork(const Sequence& parent, const Sequence& child);
  // s is retired, or dropped before it ran (a stop signal): its cursor goes with it (cursors are
  // keyed by the sequence's address, which a later sequence may take).
  void release(const Sequence& s) { cursors_.erase(&s); }

  // The mask of s's next logit row `row`: the tokens its grammar takes next, and its stop ids where
  // the grammar may end and nowhere else (model/step_batch.h's TokenMasks).
  void append_mask(const Sequence& s, int32_t row, TokenMasks* out) const;
  // s took its newest token: its cursor takes the token's bytes (a stop id, none). kNone while the
  // grammar goes on, its next mask then due (make_masks); kStop where the grammar is complete;
  // kError where the token is not one it allows, or the grammar is too ambiguous there.
  GrammarEnd advance(const Sequence& s);
  // The due masks of `sequences` (those advance left going on): memoized ones taken, the others
  // walked in parallel (a thread per core at most); then, for each in order, how it ends: kStop
  // where only a stop may follow, kError where no token can or its mask could not be made.
  std::vector<GrammarEnd> make_masks(const std::vector<const Sequence*>& sequences);

  StructuredFigures figures() const;

 private:
  struct Cursor {
    std::shared_ptr<const OutputGrammar> grammar;
    std::optional<grammar::Matcher> matcher;
    std::shared_ptr<const grammar::TokenMask> next;  // the tokens it takes next
    bool due = false;                                // it took a token whose mask is still to make
    std::string error;  // making it failed (too ambiguous, out of memory)
  };
  static Cursor start(std::shared_ptr<const OutputGrammar> grammar);
  // Whether a completion after `prompt` loses its first piece's leading space in its text (a
  // prompt of control tokens only, and a tokenizer that strips the text's first space, as
  // SentencePiece does): the grammar, which takes each token's bytes, would disagree with it.
  bool drops_first_space(const std::vector<int32_t>& prompt);
  // Makes a due mask (any thread, one per cursor): nothing escapes.
  static void compute_mask(Cursor& c);
  GrammarEnd settle(const Sequence& s, Cursor& c) const;
  static GrammarEnd failed(const Sequence& s, const std::string& why);

  const Tokenizer* tokenizer_;
  int model_vocab_;
  StopRules rules_;
  std::unique_ptr<OutputGrammars> grammars_;  // made at the first constrained request
  std::unordered_map<const Sequence*, Cursor> cursors_;
  std::unique_ptr<WorkerPool> pool_;  // started at the first step with two walks or more
  long long requests_ = 0;
  std::optional<bool> strips_leading_space_;  // the tokenizer's, found at the first need
};

}  // namespace tpllama
