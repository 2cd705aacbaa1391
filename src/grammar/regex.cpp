// A recursive-descent reader of a regular expression into grammar rules, and code point sets into
// UTF-8 byte sequences.
#include "grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"

namespace tpllama::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Code points as sorted, disjoint, inclusive ranges.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

CodeRanges normalized(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

// Every scalar value (no surrogates) not in r.
CodeRanges complement(const CodeRanges& r) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  CodeRanges scalar;  // without the surrogates, which UTF-8 cannot hold
  for (const auto& [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      scalar.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) scalar.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) scalar.emplace_back(0xE000, hi);
  }
  return scalar;
}

// The ASCII code points of r. Python reads \d \w \s by Unicode and ECMA-262 \s so: their
// negations, and a negated class holding them, keep to ASCII, where every reading agrees.
CodeRanges ascii(const CodeRanges& r) {
  CodeRanges out;
  for (const auto& [lo, hi] : r)
    if (lo <= 0x7F) out.emplace_back(lo, std::min<uint32_t>(hi, 0x7F));
  return out;
}

std::string utf8(uint32_t c) {
  std::string s;
  utf8::append(s, static_cast<char32_t>(c));
  return s;
}

// The byte sequences of the code points [lo, hi] (all of one encoded length), split until each
// byte position of a piece is one contiguous byte range.
void utf8_pieces(uint32_t lo, uint32_t hi,
                 std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (int i = 1; i < 4; ++i) {
    const uint32_t low_bits = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~low_bits) == (hi & ~low_bits)) continue;
    if ((lo & low_bits) != 0) {
      utf8_pieces(lo, lo | low_bits, out);
      utf8_pieces((lo | low_bits) + 1, hi, out);
      return;
    }
    if ((hi & low_bits) != low_bits) {
      utf8_pieces(lo, (hi & ~low_bits) - 1, out);
      utf8_pieces(hi & ~low_bits, hi, out);
      return;
    }
  }
  const std::string a = utf8(lo), b = utf8(hi);
  std::vector<std::pair<uint8_t, uint8_t>> piece;
  for (size_t k = 0; k < a.size(); ++k)
    piece.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out.push_back(std::move(piece));
}

// The code points of `ranges` as one symbol: a rule with an alternative per UTF-8 piece, the
// one-byte ones merged into a single byte set.
GrammarBuilder::Sequence code_points(GrammarBuilder& b, const CodeRanges& ranges) {
  ByteSet ascii;
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> pieces;
  for (auto [lo, hi] : normalized(ranges)) {
    for (const uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {  // one encoded length at a time
      if (lo <= edge && hi > edge) {
        utf8_pieces(lo, edge, pieces);
        lo = edge + 1;
      }
    }
    utf8_pieces(lo, hi, pieces);
  }
  std::vector<GrammarBuilder::Sequence> alternatives;
  for (const auto& piece : pieces) {
    if (piece.size() == 1) {
      ascii.add_range(piece[0].first, piece[0].second);
      continue;
    }
    GrammarBuilder::Sequence seq;
    for (const auto& [first, last] : piece) {
      ByteSet set;
      set.add_range(first, last);
      seq.push_back(b.bytes(set));
    }
    alternatives.push_back(std::move(seq));
  }
  if (!ascii.empty()) alternatives.insert(alternatives.begin(), {b.bytes(ascii)});
  if (alternatives.empty()) fail("a character class that matches nothing");
  if (alternatives.size() == 1) return alternatives.front();
  const uint32_t rule = b.fresh_rule("class");
  for (auto& alt : alternatives) b.add_alternative(rule, std::move(alt));
  return {GrammarBuilder::ref(rule)};
}

const CodeRanges kDigit = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodeRanges kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexReader {
 public:
  RegexReader(GrammarBuilder& b, std::string_view p, const RegexOptions& limits)
      : b_(b), p_(p), options_(limits) {}

  GrammarBuilder::Symbol read() {
    if (p_.size() > options_.max_pattern_bytes)
      fail("the regex is ", p_.size(), " bytes, more than ", options_.max_pattern_bytes);
    if (!p_.empty() && p_.front() == '^') ++at_;  // fullmatch anchors it anyway
    GrammarBuilder::Sequence whole = alternation(0);
    if (at_ != p_.size()) refuse("an unmatched ')'");
    const uint32_t rule = b_.fresh_rule("regex");
    b_.add_alternative(rule, std::move(whole));
    return GrammarBuilder::ref(rule);
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    fail("regex ", quoted(), ": ", what, " at offset ", at_, " is not supported");
  }
  std::string quoted() const {
    const std::string_view shown = p_.substr(0, 80);
    return "'" + std::string(shown) + (p_.size() > shown.size() ? "...'" : "'");
  }
  bool more() const { return at_ < p_.size(); }
  char peek() const { return p_[at_]; }
  bool eat(char c) {
    if (!more() || peek() != c) return false;
    ++at_;
    return true;
  }

  // One code point of UTF-8 text.
  uint32_t next_code_point() {
    if (utf8::valid_length(p_, at_) == 0) refuse("invalid UTF-8");
    return utf8::decode(p_, at_);
  }

  GrammarBuilder::Sequence alternation(int depth) {
    if (depth > options_.max_depth)
      refuse("nesting deeper than " + std::to_string(options_.max_depth));
    std::vector<GrammarBuilder::Sequence> alternatives{concatenation(depth)};
    while (eat('|')) alternatives.push_back(concatenation(depth));
    if (alternatives.size() == 1) return std::move(alternatives.front());
    const uint32_t rule = b_.fresh_rule("alt");
    for (auto& alt : alternatives) b_.add_alternative(rule, std::move(alt));
    return {GrammarBuilder::ref(rule)};
  }

  GrammarBuilder::Sequence concatenation(int depth) {
    GrammarBuilder::Sequence seq;
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && at_ + 1 == p_.size()) {  // fullmatch ends there anyway
        ++at_;
        break;
      }
      GrammarBuilder::Sequence item = atom(depth);
      item = quantified(std::move(item));
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  int number() {
    int n = 0;
    bool any = false;
    while (more() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (p_[at_++] - '0');
      any = true;
      if (n > options_.max_count)
        refuse("a repetition count above " + std::to_string(options_.max_count));
    }
    return any ? n : -1;
  }

  // The quantifier at at_, if there is one: its bounds, at_ past it (and past a lazy '?'), true.
  // A malformed {..} is literal text, as Python reads it: false, at_ where it was.
  bool quantifier(int& min, int& max) {
    min = 0;
    max = -1;
    if (!more()) return false;
    const size_t start = at_;
    if (eat('*')) {
    } else if (eat('+')) {
      min = 1;
    } else if (eat('?')) {
      max = 1;
    } else if (peek() == '{') {
      ++at_;
      const int lo = number();
      int hi = lo;
      if (eat(',')) hi = number();
      if (!eat('}') || (lo < 0 && hi < 0)) {
        at_ = start;
        return false;
      }
      min = std::max(lo, 0);
      max = hi;
      if (max >= 0 && max < min)
        refuse("a repetition {" + std::to_string(min) + "," + std::to_string(max) +
               "} with max below min");
    } else {
      return false;
    }
    if (eat('+')) refuse("a possessive quantifier");
    eat('?');  // lazy: the same texts
    return true;
  }

  GrammarBuilder::Sequence quantified(GrammarBuilder::Sequence item) {
    int min = 0, max = -1;
    if (!quantifier(min, max)) return item;
    item = {b_.repeat(item, min, max, "rep")};
    // Python and ECMA-262 refuse a quantifier of a quantifier ("multiple repeat").
    const size_t after = at_;
    if (quantifier(min, max)) {
      at_ = after;
      refuse("a quantifier of a quantifier (multiple repeat)");
    }
    return item;
  }

  GrammarBuilder::Sequence atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++at_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (eat('P')) {
          if (more() && peek() == '=') refuse("a backreference '(?P=name)'");
          if (!eat('<'))
            refuse("a group of kind '(?P" + std::string(1, more() ? peek() : ' ') + "'");
          while (more() && peek() != '>') ++at_;
          if (!eat('>')) refuse("an unterminated group name");
        } else {
          refuse("a group of kind '(?" + std::string(1, more() ? peek() : ' ') + "'");
        }
      }
      GrammarBuilder::Sequence inner = alternation(depth + 1);
      if (!eat(')')) refuse("a missing ')'");
      // A group of its own rule, so a quantifier repeats the whole group.
      const uint32_t rule = b_.fresh_rule("group");
      b_.add_alternative(rule, std::move(inner));
      return {GrammarBuilder::ref(rule)};
    }
    if (c == '[') return points(char_class());
    if (c == '.') {
      ++at_;
      return points(complement({{'\n', '\n'}}));
    }
    if (c == '*' || c == '+' || c == '?') refuse("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') refuse("an anchor inside the pattern");
    if (c == '\\') {
      ++at_;
      CodeRanges r;
      if (escape(false, r)) return points(r);
      return literal(r.front().first);
    }
    return literal(next_code_point());
  }

  // The code points a JSON string may hold unescaped.
  static bool json_plain(uint32_t c) { return c >= 0x20 && c != '"' && c != '\\'; }

  GrammarBuilder::Sequence literal(uint32_t c) {
    if (options_.json_string && !json_plain(c))
      refuse("a character a JSON string must escape (U+" + std::to_string(c) + ")");
    return b_.literal(utf8(c));
  }

  GrammarBuilder::Sequence points(CodeRanges r) {
    if (options_.json_string) {  // without '"', '\\' and the control characters
      r = normalized(r);
      CodeRanges kept;
      for (const auto& [lo, hi] : r) {
        const auto keep = [&](uint32_t a, uint32_t z) {
          if (a <= z) kept.emplace_back(a, z);
        };
        const uint32_t from = std::max<uint32_t>(lo, 0x20);
        if (from > hi) continue;
        uint32_t start = from;
        for (const uint32_t cut : {static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
          if (cut >= start && cut <= hi) {
            keep(start, cut - 1);
            start = cut + 1;
          }
        }
        keep(start, hi);
      }
      r = std::move(kept);
    }
    return code_points(b_, r);
  }

  // After a backslash: a class escape (true, its ranges) or one code point (false, r = {c, c}).
  bool escape(bool in_class, CodeRanges& r) {
    if (!more()) refuse("a trailing backslash");
    const char c = p_[at_++];
    // The class escapes (their upper case: the complement), and the one-character ones.
    const std::pair<char, const CodeRanges*> classes[] = {
        {'d', &kDigit}, {'w', &kWord}, {'s', &kSpace}};
    for (const auto& [name, ranges] : classes) {
      if (c != name && c != name - 'a' + 'A') continue;
      // \S also leaves out U+001C..U+001F, which Python's Unicode \s holds.
      r = c == name ? *ranges
                    : ascii(complement(c == 'S' ? CodeRanges{{'\t', '\r'}, {0x1C, ' '}} : *ranges));
      return true;
    }
    const std::pair<char, uint32_t> single[] = {{'n', '\n'}, {'t', '\t'}, {'r', '\r'},
                                                {'f', '\f'}, {'v', '\v'}, {'0', 0}};
    for (const auto& [name, code] : single)
      if (c == name) {
        r = {{code, code}};
        return false;
      }
    switch (c) {
      case 'x':
        return hex(2, r);
      case 'u':
        return hex(4, r);
      case 'U':
        return hex(8, r);
      case 'b':
        if (in_class) {
          r = {{'\b', '\b'}};
          return false;
        }
        break;
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
      --at_;
      refuse(std::string("the escape \\") + c);
    }
    --at_;
    const uint32_t cp = next_code_point();  // an escaped punctuation mark or character: itself
    r = {{cp, cp}};
    return false;
  }

  bool hex(int digits, CodeRanges& r) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (!more() || !std::isxdigit(static_cast<unsigned char>(peek())))
        refuse("a short hex escape");
      const char h = p_[at_++];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) refuse("a hex escape beyond Unicode");
    r = {{v, v}};
    return false;
  }

  CodeRanges char_class() {
    ++at_;  // '['
    const bool negated = eat('^');
    CodeRanges ranges;
    bool first = true;
    bool has_class = false;  // \d \w \s or their negations inside
    while (more() && (peek() != ']' || first)) {
      first = false;
      if (peek() == '[' && at_ + 1 < p_.size() && p_[at_ + 1] == ':') refuse("a POSIX class");
      CodeRanges item;
      bool is_class = false;
      if (eat('\\')) {
        is_class = escape(true, item);
        has_class = has_class || is_class;
      } else
        item = {{next_code_point(), 0}}, item[0].second = item[0].first;
      if (!is_class && more() && peek() == '-' && at_ + 1 < p_.size() && p_[at_ + 1] != ']') {
        ++at_;
        CodeRanges hi;
        if (eat('\\') ? escape(true, hi)
                      : (hi = {{next_code_point(), 0}}, hi[0].second = hi[0].first, false))
          refuse("a range ending in a class escape");
        if (hi[0].first < item[0].first) refuse("a range out of order");
        item[0].second = hi[0].first;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    if (!eat(']')) refuse("an unterminated '['");
    if (!negated) return normalized(ranges);
    return has_class ? ascii(complement(ranges)) : complement(ranges);
  }

  GrammarBuilder& b_;
  std::string_view p_;
  RegexOptions options_;
  size_t at_ = 0;
};

}  // namespace

GrammarBuilder::Symbol add_regex(GrammarBuilder& builder, std::string_view pattern,
                                 const RegexOptions& limits) {
  return RegexReader(builder, pattern, limits).read();
}

Grammar compile_regex(std::string_view pattern, const RegexOptions& limits,
                      const GrammarLimits& grammar_limits) {
  GrammarBuilder b(grammar_limits);
  const uint32_t root = b.rule("root");
  b.add_alternative(root, {add_regex(b, pattern, limits)});
  return b.build(root);
}

}  // namespace tpllama::grammar
