// The parse stacks of a byte grammar, advanced a byte at a time.
#include "grammar/matcher.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace tpllama::grammar {

Matcher::Matcher(const Grammar& g, size_t max_stacks) : g_(&g), max_stacks_(max_stacks) {
  for (const uint32_t alt : g.alternatives.at(g.root)) expand(Stack{alt}, stacks_);
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
  if (stacks_.size() > max_stacks_)
    fail("the grammar is too ambiguous at its start: more than ", max_stacks_,
         " parses are alive at once");
}

void Matcher::expand(Stack s, std::vector<Stack>& out) const {
  std::vector<Stack> work;
  work.push_back(std::move(s));
  // The stacks entered so far: a loop of tail calls through rules that match nothing (a*'s in a
  // repetition) comes back to one of them, and stops there.
  std::set<Stack> entered;
  while (!work.empty()) {
    Stack stack = std::move(work.back());
    work.pop_back();
    if (!entered.insert(stack).second) continue;
    while (true) {
      if (stack.empty()) {  // the root's alternative ended: the text may end here
        out.push_back(std::move(stack));
        break;
      }
      const uint32_t p = stack.back();
      const uint32_t e = g_->elements[p];
      if (e == Grammar::kEnd) {  // this alternative ended: its caller goes on after the call
        stack.pop_back();
        if (!stack.empty()) ++stack.back();
        continue;
      }
      if ((e & Grammar::kRuleFlag) == 0) {  // a byte set: this stack waits for a byte
        out.push_back(std::move(stack));
        break;
      }
      // A rule: its caller resumes after it, unless the call ends the caller (a tail call).
      if (g_->elements[p + 1] == Grammar::kEnd) stack.pop_back();
      for (const uint32_t alt : g_->alternatives[e & ~Grammar::kRuleFlag]) {
        Stack callee = stack;
        callee.push_back(alt);
        work.push_back(std::move(callee));
      }
      if (out.size() + work.size() > 16 * max_stacks_)
        fail("the grammar is too ambiguous here: more than ", max_stacks_,
             " parses are alive at once");
      break;
    }
  }
}

std::vector<Matcher::Stack> Matcher::step(const std::vector<Stack>& from, uint8_t b) const {
  std::vector<Stack> next;
  for (const Stack& s : from) {
    if (s.empty() || !g_->sets[g_->elements[s.back()]].has(b)) continue;
    Stack moved = s;
    ++moved.back();
    expand(std::move(moved), next);
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  if (next.size() > max_stacks_)
    fail("the grammar is too ambiguous here: more than ", max_stacks_, " parses are alive at once");
  return next;
}

bool Matcher::advance(uint8_t b) {
  std::vector<Stack> next = step(stacks_, b);
  if (next.empty()) return false;
  stacks_ = std::move(next);
  return true;
}

bool Matcher::advance(std::string_view bytes) {
  std::vector<Stack> at = stacks_;
  for (const char c : bytes) {
    at = step(at, static_cast<uint8_t>(c));
    if (at.empty()) return false;
  }
  stacks_ = std::move(at);
  return true;
}

bool Matcher::accepts(std::string_view bytes) const {
  std::vector<Stack> at = stacks_;
  for (const char c : bytes) {
    at = step(at, static_cast<uint8_t>(c));
    if (at.empty()) return false;
  }
  return true;
}

bool Matcher::can_end() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::can_continue() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return !s.empty(); });
}

}  // namespace tpllama::grammar
