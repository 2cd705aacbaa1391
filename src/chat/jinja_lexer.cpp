// Jinja2's lexer for the default delimiters, re-expressed as a scanner: see jinja_lexer.h.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "chat/jinja_text.h"
#include "core/utf8.h"

namespace tpllama::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Jinja normalises \r\n and \r to \n and, without keep_trailing_newline, drops one final newline.
std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin, const LexOptions& options)
      : src_(normalize(source)), origin_(origin), options_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_text_and_tag();
    tokens_.push_back(Token{TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  bool at(size_t p, std::string_view s) const {
    return p <= src_.size() && src_.compare(p, s.size(), s) == 0;
  }

  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t next = p;
      if (!text::is_space(utf8::decode(src_, next))) break;
      p = next;
    }
    return p;
  }

  bool all_space(std::string_view s) const {
    for (size_t i = 0; i < s.size();)
      if (!text::is_space(utf8::decode(s, i))) return false;
    return true;
  }

  void push(TokenKind kind, std::string text, int line) {
    tokens_.push_back(Token{kind, std::move(text), line});
  }

  // Moves to `end`, counting lines; a tag that ends a line lets the next tag's lstrip apply.
  void advance_to(size_t end) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
    pos_ = end;
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  // Emits the data before a tag, stripped by the tag's sign or by lstrip_blocks.
  void emit_data_before_tag(size_t end, char sign, bool lstrip_applies) {
    std::string_view text(src_.data() + pos_, end - pos_);
    std::string kept;
    if (sign == '-') {
      kept = text::strip(text, false, true);
    } else if (sign != '+' && lstrip_applies && options_.lstrip_blocks) {
      const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
      const bool strip = (line_start > 0 || line_starting_) && line_start < text.size() &&
                         all_space(text.substr(line_start));
      kept = std::string(strip ? text.substr(0, line_start) : text);
    } else {
      kept = std::string(text);
    }
    if (!kept.empty()) push(TokenKind::kData, std::move(kept), line_);
    line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    pos_ = end;
  }

  void lex_text_and_tag() {
    size_t tag = pos_;
    while ((tag = src_.find('{', tag)) != std::string::npos) {
      if (tag + 1 < src_.size() &&
          (src_[tag + 1] == '%' || src_[tag + 1] == '{' || src_[tag + 1] == '#'))
        break;
      ++tag;
    }
    if (tag == std::string::npos) {
      push(TokenKind::kData, src_.substr(pos_), line_);
      advance_to(src_.size());
      return;
    }
    const char type = src_[tag + 1];
    size_t after = tag + 2;
    const char sign =
        after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
    if (sign) ++after;
    size_t raw_body = 0;
    const bool raw = type == '%' && match_raw_begin(after, raw_body);
    emit_data_before_tag(tag, sign, type != '{');
    if (raw) {
      advance_to(raw_body);
      lex_raw();
    } else if (type == '#') {
      lex_comment(after);
    } else {
      const bool block = type == '%';
      push(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", line_);
      advance_to(after);
      lex_tag(block);
    }
  }

  // `{% raw %}` (its `{%` and sign already read): `raw`, then `-%}` with following space, or `%}`.
  bool match_raw_begin(size_t p, size_t& body) const {
    p = skip_space(p);
    if (!at(p, "raw")) return false;
    p = skip_space(p + 3);
    if (at(p, "-%}")) {
      body = skip_space(p + 3);
      return true;
    }
    if (at(p, "%}")) {
      body = p + 2;
      return true;
    }
    return false;
  }

  void lex_raw() {
    for (size_t p = pos_; (p = src_.find("{%", p)) != std::string::npos; ++p) {
      size_t q = p + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      q = skip_space(q + (sign ? 1 : 0));
      if (!at(q, "endraw")) continue;
      q = skip_space(q + 6);
      size_t end;
      if (at(q, "+%}")) {
        end = q + 3;
      } else if (at(q, "-%}")) {
        end = skip_space(q + 3);
      } else if (at(q, "%}")) {
        end = q + 2 + (options_.trim_blocks && at(q + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      emit_data_before_tag(p, sign, true);
      advance_to(end);
      return;
    }
    fail_at(origin_, line_, "missing end of raw directive ('{% endraw %}')");
  }

  void lex_comment(size_t p) {
    for (; p + 1 < src_.size(); ++p) {
      size_t end = 0;
      if ((src_[p] == '+' || src_[p] == '-') && at(p + 1, "#}")) {
        end = src_[p] == '-' ? skip_space(p + 3) : p + 3;
      } else if (at(p, "#}")) {
        end = p + 2 + (options_.trim_blocks && at(p + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      advance_to(end);
      return;
    }
    fail_at(origin_, line_, "missing end of comment tag ('#}')");
  }

  // The end of a tag when brackets are balanced; 0 when `pos_` is not at one.
  size_t tag_end(bool block) const {
    if (block) {
      if (at(pos_, "+%}")) return pos_ + 3;
      if (at(pos_, "-%}")) return skip_space(pos_ + 3);
      if (at(pos_, "%}")) return pos_ + 2 + (options_.trim_blocks && at(pos_ + 2, "\n") ? 1 : 0);
    } else {
      if (at(pos_, "-}}")) return skip_space(pos_ + 3);
      if (at(pos_, "}}")) return pos_ + 2;
    }
    return 0;
  }

  void lex_tag(bool block) {
    std::vector<char> closers;  // brackets still open, innermost last
    while (true) {
      if (pos_ >= src_.size())
        fail_at(origin_, line_, "unexpected end of template, expected '", block ? "%}" : "}}", "'");
      if (closers.empty()) {
        if (const size_t end = tag_end(block)) {
          push(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", line_);
          advance_to(end);
          return;
        }
      }
      const size_t space_end = skip_space(pos_);
      if (space_end != pos_) {
        advance_to(space_end);
        continue;
      }
      const char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t end = pos_;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        push(TokenKind::kName, src_.substr(pos_, end - pos_), line_);
        advance_to(end);
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(closers);
      }
    }
  }

  // Digits with `_` separators; a float needs digits after its point or an exponent.
  void lex_number() {
    auto digits = [&](size_t p) {
      while (p < src_.size() && (is_digit(src_[p]) ||
                                 (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]))))
        ++p;
      return p;
    };
    size_t end = digits(pos_);
    bool is_float = false;
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';  // `x.0.1` is two lookups
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        end = digits(e);
        is_float = true;
      }
    }
    std::string literal;
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] != '_') literal += src_[i];
    if (!is_float && literal.size() > 1 && literal[0] == '0' &&
        literal.find_first_not_of('0') != std::string::npos)
      fail_at(origin_, line_, "leading zeros in an integer literal: ", literal);
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInteger, literal, line_};
    if (is_float) {
      t.float_value = std::strtod(literal.c_str(), nullptr);
    } else {
      // Python's ints are unbounded; ours are 64-bit, so a literal beyond them is refused rather
      // than saturated (strtoll's ERANGE).
      errno = 0;
      t.int_value = std::strtoll(literal.c_str(), nullptr, 10);
      if (errno == ERANGE)
        fail_at(origin_, line_, "integer literal ", literal, " is beyond 64 bits (the largest is ",
                std::numeric_limits<std::int64_t>::max(), ")");
    }
    tokens_.push_back(std::move(t));
    advance_to(end);
  }

  void lex_string() {
    const char quote = src_[pos_];
    size_t p = pos_ + 1;
    std::string value;
    while (p < src_.size() && src_[p] != quote) {
      if (src_[p] == '\\' && p + 1 < src_.size()) {
        p = unescape(p, value);
      } else {
        value += src_[p++];
      }
    }
    if (p >= src_.size())
      fail_at(origin_, line_, "unterminated string starting with ", src_.substr(pos_, 20));
    push(TokenKind::kString, std::move(value), line_);
    advance_to(p + 1);
  }

  // One backslash escape at `p` as Python's unicode-escape decodes it; returns the next position.
  size_t unescape(size_t p, std::string& value) const {
    const char e = src_[p + 1];
    static constexpr std::string_view kSimple = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
    for (size_t k = 0; k < kSimple.size(); k += 2) {
      if (kSimple[k] == e) {
        value += kSimple[k + 1];
        return p + 2;
      }
    }
    if (e == '\n') return p + 2;  // a line continuation
    if (e >= '0' && e <= '7') {
      size_t q = p + 1;
      unsigned code = 0;
      while (q < src_.size() && q < p + 4 && src_[q] >= '0' && src_[q] <= '7')
        code = code * 8 + (src_[q++] - '0');
      utf8::append(value, code);
      return q;
    }
    const int hex_len = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (hex_len == 0) {
      if (e == 'N') fail_at(origin_, line_, "unsupported string escape '\\N{...}'");
      value += '\\';  // Python keeps an unknown escape as written
      return p + 1;
    }
    const std::string digits = src_.substr(p + 2, static_cast<size_t>(hex_len));
    if (digits.size() != static_cast<size_t>(hex_len) ||
        digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      fail_at(origin_, line_, "truncated \\", e, " escape in string: '\\", e, digits, "'");
    const auto code = static_cast<char32_t>(std::strtoul(digits.c_str(), nullptr, 16));
    if (code > 0x10ffff)
      fail_at(origin_, line_, "illegal Unicode character in string: \\", e, digits);
    utf8::append(value, code);
    return p + 2 + static_cast<size_t>(hex_len);
  }

  void lex_operator(std::vector<char>& closers) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const std::string_view op : kTwo) {
      if (at(pos_, op)) {
        push(TokenKind::kOperator, std::string(op), line_);
        advance_to(pos_ + 2);
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
      fail_at(origin_, line_, "unexpected character '", c, "' in tag");
    if (c == '(' || c == '[' || c == '{') closers.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (closers.empty()) fail_at(origin_, line_, "unexpected '", c, "'");
      if (closers.back() != c)
        fail_at(origin_, line_, "unexpected '", c, "', expected '", closers.back(), "'");
      closers.pop_back();
    }
    push(TokenKind::kOperator, std::string(1, c), line_);
    advance_to(pos_ + 1);
  }

  std::string src_;
  const std::string& origin_;
  LexOptions options_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& origin,
                            const LexOptions& options) {
  return Lexer(source, origin, options).run();
}

}  // namespace tpllama::jinja
