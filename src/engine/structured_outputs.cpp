// Grammar cursors, their masks, and the pool that walks them.
#include "engine/structured_outputs.h"

#include <algorithm>
#include <new>
#include <thread>

#include "core/error.h"
#include "io/output_constraint.h"

namespace tpllama {
namespace {

// Whether the mask allows a token that is not one of `stops` (a stop_token_ids entry may be a
// text token, and a row must never be left with only stop ids that min_tokens bans).
bool allows_text(const grammar::TokenMask& mask, const std::vector<int32_t>& stops) {
  for (size_t w = 0; w < mask.size(); ++w) {
    uint32_t word = mask[w];
    if (word == 0) continue;
    for (const int32_t id : stops)
      if (static_cast<size_t>(id) >> 5 == w) word &= ~(uint32_t{1} << (id & 31));
    if (word != 0) return true;
  }
  return false;
}

bool holds(const std::vector<int32_t>& ids, int token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

StructuredOutputs::StructuredOutputs(const Tokenizer* tokenizer, int model_vocab, StopRules rules)
    : tokenizer_(tokenizer), model_vocab_(model_vocab), rules_(std::move(rules)) {}

StructuredOutputs::~StructuredOutputs() = default;

StructuredOutputs::Cursor StructuredOutputs::start(std::shared_ptr<const OutputGrammar> grammar) {
  Cursor c;
  c.grammar = std::move(grammar);
  c.matcher.emplace(c.grammar->grammar());
  c.next = c.grammar->mask(*c.matcher);
  return c;
}

bool StructuredOutputs::drops_first_space(const std::vector<int32_t>& prompt) {
  const Tokenizer& tok = *tokenizer_;
  for (const int32_t id : prompt)
    if (id < tok.vocab_size() && !tok.is_control(id)) return false;  // text before: no drop
  if (!strips_leading_space_) {
    strips_leading_space_ = false;
    for (int id = 0; id < tok.vocab_size(); ++id) {
      const std::string bytes = tok.is_control(id) ? std::string() : tok.token_bytes(id);
      if (bytes.size() >= 2 && bytes[0] == ' ' && bytes[1] != ' ' &&
          static_cast<unsigned char>(bytes[1]) < 0x80) {
        strips_leading_space_ = tok.decode({id}) != bytes;
        break;
      }
    }
  }
  return *strips_leading_space_;
}

std::string StructuredOutputs::constrain(const Sequence& s, const OutputConstraint& c) {
  TPLLAMA_CHECK(s.counts().generated == 0 && !s.request().scoring,
                "a grammar for a sequence under way");
  if (tokenizer_ == nullptr)
    return "field '" + c.field + "': structured outputs need the model's tokenizer";
  if (drops_first_space(s.tokens()))
    return "field '" + c.field +
           "': the prompt has no text, so the tokenizer drops the completion's leading space, "
           "which the grammar would count: give the prompt some text";
  if (!grammars_) grammars_ = std::make_unique<OutputGrammars>(*tokenizer_, model_vocab_);
  const std::string what = "field '" + c.field + "' (" + constraint_kind_name(c.kind) + "): ";
  try {
    Cursor cursor = start(grammars_->compile(c));
    if (!allows_text(*cursor.next, stop_ids(s.request(), rules_)))
      return what + (cursor.matcher->can_end()
                         ? "the grammar matches only an empty completion"
                         : "the grammar allows no token of the model's vocabulary at its start");
    cursors_.insert_or_assign(&s, std::move(cursor));
  } catch (const std::bad_alloc&) {  // its first mask: that request's error, not the run's
    return what + "out of memory making its first token mask";
  } catch (const Error& e) {
    return what + e.what();
  }
  ++requests_;
  return "";
}

void StructuredOutputs::fork(const Sequence& parent, const Sequence& child) {
  const auto it = cursors_.find(&parent);
  if (it == cursors_.end()) {
    cursors_.erase(&child);  // cursors are keyed by address: none may survive from a freed one
    return;
  }
  // From the grammar's start, as the parent was when its rows were drawn.
  cursors_.insert_or_assign(&child, start(it->second.grammar));
}

void StructuredOutputs::append_mask(const Sequence& s, int32_t row, TokenMasks* out) const {
  const auto it = cursors_.find(&s);
  TPLLAMA_CHECK(it != cursors_.end() && it->second.next != nullptr,
                "a token mask for a sequence without a grammar");
  const Cursor& c = it->second;
  const grammar::TokenMask& mask = *c.next;
  if (out->width == 0) out->width = static_cast<int32_t>(mask.size());
  TPLLAMA_CHECK(static_cast<size_t>(out->width) == mask.size(), "masks of ", out->width, " and ",
                mask.size(), " words in one step");
  out->rows.push_back(row);
  const size_t at = out->words.size();
  out->words.insert(out->words.end(), mask.begin(), mask.end());
  // The stop ids where the grammar may end, and nowhere else (a stop_token_ids entry that is a text
  // token would otherwise cut the text where its bytes fit but the grammar cannot end).
  const bool may_end = c.matcher->can_end();
  for (const int32_t id : stop_ids(s.request(), rules_))
    if (static_cast<size_t>(id) < 32 * mask.size()) {
      uint32_t& word = out->words[at + (static_cast<size_t>(id) >> 5)];
      const uint32_t bit = uint32_t{1} << (id & 31);
      word = may_end ? word | bit : word & ~bit;
    }
}

GrammarEnd StructuredOutputs::failed(const Sequence& s, const std::string& why) {
  return {FinishReason::kError, "structured output failed after " +
                                    std::to_string(s.counts().generated) +
                                    " generated tokens: " + why};
}

GrammarEnd StructuredOutputs::advance(const Sequence& s) {
  Cursor& c = cursors_.at(&s);
  const int token = s.tokens().back();
  try {
    if (!holds(stop_ids(s.request(), rules_), token)) {
      const std::string bytes = tokenizer_ != nullptr && token < tokenizer_->vocab_size()
                                    ? tokenizer_->token_bytes(token)
                                    : std::string();
      if (bytes.empty() || !c.matcher->advance(bytes))
        return failed(s, "token " + std::to_string(token) + " is not one its grammar allows here");
    }
  } catch (const Error& e) {  // the grammar is too ambiguous here
    return failed(s, e.what());
  }
  if (!c.matcher->can_continue()) return {FinishReason::kStop, ""};  // nothing may follow
  c.next.reset();
  c.due = true;
  return {};
}

void StructuredOutputs::compute_mask(Cursor& c) {
  if (!c.due || c.next || !c.error.empty()) return;
  try {  // on a worker thread: nothing may escape
    c.next = c.grammar->mask(*c.matcher);
  } catch (const std::bad_alloc&) {
    c.error = "out of memory making its token mask";
  } catch (const std::exception& e) {  // too ambiguous: settle fails it
    c.error = e.what();
  } catch (...) {
    c.error = "an unknown error making its token mask";
  }
}

GrammarEnd StructuredOutputs::settle(const Sequence& s, Cursor& c) const {
  if (!c.due) return {};
  compute_mask(c);
  c.due = false;
  if (!c.error.empty()) return failed(s, c.error);
  if (allows_text(*c.next, stop_ids(s.request(), rules_))) return {};
  if (!c.matcher->can_end())
    return failed(s, "no token of the model's vocabulary continues its grammar here");
  return {FinishReason::kStop, ""};  // only a stop may follow: it stops now
}

std::vector<GrammarEnd> StructuredOutputs::make_masks(
    const std::vector<const Sequence*>& sequences) {
  std::vector<Cursor*> walks;  // those whose state's mask is not memoized
  for (const Sequence* s : sequences) {
    Cursor& c = cursors_.at(s);
    if (c.due && !c.next) c.next = c.grammar->memoized(*c.matcher);
    if (c.due && !c.next) walks.push_back(&c);
  }
  // Each walk is a pass over the vocabulary trie: one thread per few of them.
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min(walks.size(), cores);
  if (threads >= 2) {
    if (!pool_) pool_ = std::make_unique<WorkerPool>(cores - 1);
    pool_->run(walks.size(), threads, [&](size_t i) { compute_mask(*walks[i]); });
  }
  std::vector<GrammarEnd> ends;
  ends.reserve(sequences.size());
  for (const Sequence* s : sequences) ends.push_back(settle(*s, cursors_.at(s)));
  return ends;
}

StructuredFigures StructuredOutputs::figures() const {
  StructuredFigures f;
  f.requests = requests_;
  if (grammars_) {
    f.grammars_compiled = static_cast<long long>(grammars_->compiled());
    f.compile_seconds = grammars_->compile_ms() / 1e3;
    f.masks = grammars_->stats();
  }
  return f;
}

}  // namespace tpllama
