// Compiling constraints, with a cache by text, and memoized masks.
#include "engine/output_grammar.h"

#include <new>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/json_text.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "io/output_constraint.h"

namespace tpllama {
namespace {

// The bytes of every token of the tokenizer; none for a control (special) token, nor for the
// model's ids past the tokenizer's (padding).
std::vector<std::string> vocabulary_bytes(const Tokenizer& tokenizer, int model_vocab) {
  std::vector<std::string> bytes(
      static_cast<size_t>(std::max(model_vocab, tokenizer.vocab_size())));
  for (int id = 0; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_control(id)) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  return bytes;
}

// A matcher state as a memo key: its stacks' positions, each stack ended by a marker.
std::string state_key(const grammar::Matcher::State& state) {
  std::string key;
  for (const grammar::Matcher::Stack& stack : state) {
    for (const uint32_t p : stack) key.append(reinterpret_cast<const char*>(&p), sizeof p);
    const uint32_t end = grammar::Grammar::kEnd;
    key.append(reinterpret_cast<const char*>(&end), sizeof end);
  }
  return key;
}

grammar::Grammar choice_grammar(const std::string& choices_json) {
  const nlohmann::json choices = nlohmann::json::parse(choices_json);
  grammar::GrammarBuilder b;
  const uint32_t root = b.rule("choice");
  for (const auto& c : choices) {
    const std::string& text = c.get_ref<const std::string&>();
    if (text.empty())
      fail("an empty choice: it would allow an empty completion");  // refused at intake
    b.add_alternative(root, b.literal(text));
  }
  return b.build(root);
}

}  // namespace

grammar::Grammar compile_constraint(const OutputConstraint& c) {
  grammar::JsonSchemaOptions json;
  json.any_whitespace = !c.compact;
  json.digits.integer = json.digits.fraction = c.max_digits;
  switch (c.kind) {
    case OutputConstraint::Kind::kJsonSchema:
      return grammar::compile_json_schema(nlohmann::ordered_json::parse(c.text), json);
    case OutputConstraint::Kind::kJsonObject:
      return grammar::json_object_grammar(json);
    case OutputConstraint::Kind::kRegex:
      return grammar::compile_regex(c.text);
    case OutputConstraint::Kind::kChoice:
      return choice_grammar(c.text);
    case OutputConstraint::Kind::kGrammar:
      return grammar::compile_gbnf(c.text);
  }
  fail("unknown constraint kind");
}

void MaskRecorder::add(double seconds, bool walked) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.time.add(seconds);
  stats_.computed += walked ? 1 : 0;
}

MaskStats MaskRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

OutputGrammar::OutputGrammar(grammar::Grammar g, const grammar::TokenTrie& trie, size_t memo_bytes,
                             MaskRecorder* stats)
    : grammar_(std::move(g)), trie_(trie), stats_(stats), memo_limit_(memo_bytes) {}

namespace {
// What one memo entry holds: its mask, its key (twice: the map's and the order's), and the nodes
// and control blocks around them.
size_t entry_bytes(const std::string& key, const grammar::TokenMask& mask) {
  return mask.size() * sizeof(uint32_t) + 2 * key.size() + 256;
}
}  // namespace

std::shared_ptr<const grammar::TokenMask> OutputGrammar::lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memo_.find(key);
  return it == memo_.end() ? nullptr : it->second;
}

std::shared_ptr<const grammar::TokenMask> OutputGrammar::mask(const grammar::Matcher& m) const {
  const Clock::time_point start = Clock::now();
  std::string key = state_key(m.state());
  std::shared_ptr<const grammar::TokenMask> found = lookup(key);
  bool walked = false;
  if (!found) {
    found = std::make_shared<const grammar::TokenMask>(trie_.allowed(m));
    walked = true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (memo_.emplace(key, found).second) {
      memo_bytes_ += entry_bytes(key, *found);
      order_.push_back(std::move(key));
      while (memo_bytes_ > memo_limit_ && !order_.empty()) {  // the oldest go (first in, first out)
        auto it = memo_.find(order_.front());
        memo_bytes_ -= entry_bytes(order_.front(), *it->second);
        memo_.erase(it);
        order_.pop_front();
      }
    }
  }
  if (stats_ != nullptr) stats_->add(seconds_since(start), walked);
  return found;
}

std::shared_ptr<const grammar::TokenMask> OutputGrammar::memoized(const grammar::Matcher& m) const {
  const Clock::time_point start = Clock::now();
  std::shared_ptr<const grammar::TokenMask> found = lookup(state_key(m.state()));
  if (found && stats_ != nullptr) stats_->add(seconds_since(start), false);
  return found;
}

OutputGrammars::OutputGrammars(const Tokenizer& tokenizer, int model_vocab)
    : trie_(std::make_unique<grammar::TokenTrie>(vocabulary_bytes(tokenizer, model_vocab))) {}

std::shared_ptr<const OutputGrammar> OutputGrammars::compile(const OutputConstraint& c) {
  std::string key = constraint_kind_name(c.kind);
  key += '\0';
  key += c.text;
  key += '\0';
  key += (c.compact ? "compact " : "spaced ") + std::to_string(c.max_digits);
  if (auto it = cache_.find(key); it != cache_.end()) {
    order_.remove(key);  // most recently used last; the list is short (kMaxGrammars)
    order_.push_back(key);
    if (!it->second.grammar) throw Error(it->second.refusal);
    return it->second.grammar;
  }
  const Clock::time_point start = Clock::now();
  Compiled entry;
  try {
    entry.grammar =
        std::make_shared<const OutputGrammar>(compile_constraint(c), *trie_, kMemoBytes, &stats_);
  } catch (const std::bad_alloc&) {
    entry.refusal = "out of memory compiling it";
  } catch (const std::exception& e) {  // refused (Error, or a parser's own): so is every later
    entry.refusal = e.what();          // request of the same text, at once
  }
  compile_ms_ += 1e3 * seconds_since(start);
  ++compiled_;
  auto compiled = entry.grammar;
  const std::string refusal = entry.refusal;
  cache_.emplace(key, std::move(entry));
  order_.push_back(std::move(key));
  if (order_.size() > kMaxGrammars) {
    cache_.erase(order_.front());  // sequences still running keep theirs (shared)
    order_.pop_front();
  }
  if (!compiled) throw Error(refusal);
  return compiled;
}

}  // namespace tpllama
