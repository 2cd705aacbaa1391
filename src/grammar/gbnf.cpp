// A recursive-descent reader of GBNF text into grammar rules; its terminals go through the regex
// reader (a GBNF class is a regex class, a literal a sequence of code points).
#include "grammar/gbnf.h"

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "grammar/regex.h"

namespace tpllama::grammar {
namespace {

class GbnfReader {
 public:
  GbnfReader(std::string_view text, const GbnfLimits& limits)
      : t_(text), limits_(limits), b_(limits.grammar) {}

  Grammar read() {
    if (t_.size() > limits_.max_bytes)
      fail("the grammar is ", t_.size(), " bytes, more than ", limits_.max_bytes);
    skip(true);
    while (more()) {
      const std::string name = rule_name();
      if (name.empty()) refuse("a rule name");
      const uint32_t rule = b_.rule(name);
      if (defined_.size() <= rule) defined_.resize(rule + 1, false);
      if (defined_[rule]) refuse("rule '" + name + "' defined twice");
      defined_[rule] = true;
      skip(false);
      if (t_.substr(at_, 3) != "::=") refuse("'::=' after the rule name");
      at_ += 3;
      skip(true);
      for (GrammarBuilder::Sequence& alt : alternatives(false, 0))
        b_.add_alternative(rule, std::move(alt));
      skip(true);
    }
    const uint32_t root = b_.rule("root");
    if (root >= defined_.size() || !defined_[root])
      fail("the grammar has no rule 'root' (where a text starts)");
    return b_.build(root);
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    size_t line = 1;
    for (size_t i = 0; i < at_ && i < t_.size(); ++i) line += t_[i] == '\n';
    fail("grammar line ", line, ": expected ", what);
  }
  bool more() const { return at_ < t_.size(); }
  char peek() const { return t_[at_]; }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void skip(bool newlines) {
    while (more()) {
      const char c = peek();
      if (c == '#') {
        while (more() && peek() != '\n') ++at_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++at_;
      } else {
        break;
      }
    }
  }

  std::string rule_name() {
    const size_t start = at_;
    while (more() &&
           (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '-' || peek() == '_'))
      ++at_;
    return std::string(t_.substr(start, at_ - start));
  }

  std::vector<GrammarBuilder::Sequence> alternatives(bool nested, int depth) {
    if (depth > limits_.max_depth)
      refuse("groups nested at most " + std::to_string(limits_.max_depth) + " deep");
    std::vector<GrammarBuilder::Sequence> alts{sequence(nested, depth)};
    while (more() && peek() == '|') {
      ++at_;
      skip(true);
      alts.push_back(sequence(nested, depth));
    }
    return alts;
  }

  GrammarBuilder::Sequence sequence(bool nested, int depth) {
    GrammarBuilder::Sequence seq;
    while (true) {
      skip(nested);
      if (!more() || peek() == '|' || peek() == ')' || peek() == '\n') break;
      GrammarBuilder::Sequence item = this->item(depth);
      item = quantified(std::move(item));
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  GrammarBuilder::Sequence quantified(GrammarBuilder::Sequence item) {
    while (more()) {
      int min = 0, max = -1;
      if (peek() == '*') {
        ++at_;
      } else if (peek() == '+') {
        ++at_;
        min = 1;
      } else if (peek() == '?') {
        ++at_;
        max = 1;
      } else if (peek() == '{') {
        ++at_;
        skip(false);
        min = number();
        skip(false);
        max = min;
        if (more() && peek() == ',') {
          ++at_;
          skip(false);
          max = more() && std::isdigit(static_cast<unsigned char>(peek())) ? number() : -1;
          skip(false);
        }
        if (!more() || peek() != '}') refuse("'}' closing a repetition");
        ++at_;
        if (max >= 0 && max < min) refuse("a repetition whose maximum is at least its minimum");
      } else {
        return item;
      }
      item = {b_.repeat(item, min, max, "rep")};
    }
    return item;
  }

  int number() {
    if (!more() || !std::isdigit(static_cast<unsigned char>(peek()))) refuse("a number");
    long n = 0;
    while (more() && std::isdigit(static_cast<unsigned char>(peek()))) {
      n = n * 10 + (t_[at_++] - '0');
      if (n > 10000) refuse("a repetition count of at most 10000");
    }
    return static_cast<int>(n);
  }

  GrammarBuilder::Sequence item(int depth) {
    const char c = peek();
    if (c == '"') return literal();
    if (c == '[') return char_class();
    if (c == '.') {
      ++at_;
      return {add_regex(b_, "(?:.|\\n)")};  // any code point
    }
    if (c == '(') {
      ++at_;
      skip(true);
      std::vector<GrammarBuilder::Sequence> alts = alternatives(true, depth + 1);
      skip(true);
      if (!more() || peek() != ')') refuse("')' closing a group");
      ++at_;
      const uint32_t rule = b_.fresh_rule("group");
      for (GrammarBuilder::Sequence& alt : alts) b_.add_alternative(rule, std::move(alt));
      return {GrammarBuilder::ref(rule)};
    }
    const std::string name = rule_name();
    if (name.empty()) refuse(std::string("an item, not '") + c + "'");
    return {GrammarBuilder::ref(b_.rule(name))};
  }

  // The regex text of one escape, checked and left to the regex reader.
  std::string escape() {
    ++at_;  // the backslash
    if (!more()) refuse("an escape after '\\'");
    const char e = t_[at_++];
    const int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (hex > 0) {
      std::string s = std::string("\\") + e;
      for (int k = 0; k < hex; ++k) {
        if (!more() || !std::isxdigit(static_cast<unsigned char>(peek())))
          refuse(std::to_string(hex) + " hex digits after '\\" + e + "'");
        s += t_[at_++];
      }
      return s;
    }
    switch (e) {
      case 'n':
      case 'r':
      case 't':
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        return std::string("\\") + e;
      default:
        refuse(std::string("a known escape, not '\\") + e + "'");
    }
  }

  // The text of a literal or a class up to its closing character (on its line), as regex text:
  // escapes checked, and each other character as itself (escaped where the regex reader would
  // read it otherwise: punctuation in a literal, '[' in a class).
  std::string terminal(char close, const char* what, bool in_class) {
    const std::string closing = std::string("'") + close + "' closing " + what;
    std::string regex;
    while (more() && peek() != close) {
      if (peek() == '\n') refuse(closing + " on its line");
      if (peek() == '\\') {
        regex += escape();
        continue;
      }
      const char c = t_[at_++];
      if (in_class ? c == '[' : std::ispunct(static_cast<unsigned char>(c)) != 0) regex += '\\';
      regex += c;
    }
    if (!more()) refuse(closing);
    ++at_;
    return regex;
  }

  GrammarBuilder::Sequence literal() {
    ++at_;  // the opening quote
    const std::string regex = terminal('"', "a literal", false);
    if (regex.empty()) return {};
    return {add_regex(b_, regex)};
  }

  GrammarBuilder::Sequence char_class() {
    ++at_;
    std::string regex = "[";
    if (more() && peek() == '^') regex += t_[at_++];
    return {add_regex(b_, regex + terminal(']', "a class", true) + "]")};
  }

  std::string_view t_;
  GbnfLimits limits_;
  GrammarBuilder b_;
  std::vector<bool> defined_;
  size_t at_ = 0;
};

}  // namespace

Grammar compile_gbnf(std::string_view text, const GbnfLimits& limits) {
  return GbnfReader(text, limits).read();
}

}  // namespace tpllama::grammar
