// Jinja2's expression grammar and operator precedence over the token stream: what sits inside
// `{{ }}` and after a tag's name. Statements are parsed in jinja_parser.cpp.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace tpllama::jinja {

// One template's tokens and a position in them, with the error helpers both parsers share.
class TokenCursor {
 public:
  TokenCursor(std::vector<Token> tokens, const std::string& origin)
      : tokens_(std::move(tokens)), origin_(origin) {}

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  void skip(size_t n = 1) { pos_ += n; }
  static bool is_op(const Token& t, std::string_view op) {
    return t.kind == TokenKind::kOperator && t.text == op;
  }
  static bool is_name(const Token& t, std::string_view name) {
    return t.kind == TokenKind::kName && t.text == name;
  }
  bool at_op(std::string_view op) const { return is_op(peek(), op); }
  bool at_name(std::string_view name) const { return is_name(peek(), name); }
  bool skip_op(std::string_view op) { return is_op(peek(), op) ? (++pos_, true) : false; }
  bool skip_name(std::string_view name) { return is_name(peek(), name) ? (++pos_, true) : false; }
  void expect_op(std::string_view op);
  std::string expect_name();
  // How an error message names a token: "'for'", "end of template", ...
  static std::string describe(const Token& t);
  template <typename... Args>
  [[noreturn]] void error(const Token& at, Args&&... args) const {
    fail_at(origin_, at.line, std::forward<Args>(args)...);
  }
  // One level of parser recursion in (enter) and out (leave): past kMaxParseNesting the template
  // is refused at the current token's line, before the recursion can take the stack.
  void enter();
  void leave() { --nesting_; }

 private:
  std::vector<Token> tokens_;
  const std::string& origin_;
  size_t pos_ = 0;
  int nesting_ = 0;  // statements and expressions, counted together
};

// Counts one level of TokenCursor nesting while alive.
class NestingGuard {
 public:
  explicit NestingGuard(TokenCursor& in) : in_(in) { in_.enter(); }
  ~NestingGuard() { in_.leave(); }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  TokenCursor& in_;
};

class ExpressionParser {
 public:
  explicit ExpressionParser(TokenCursor& in) : in_(in) {}

  // A comma list becomes a tuple: `{{ a, b }}`, `{% set x = 1, 2 %}`, `for x in a, b`.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens);
  // Without condexpr, `a if b else c` is not read (an `if` condition, a for loop's iterable).
  ExprPtr parse_expression(bool with_condexpr);

  // Names called as functions (`f(x)`) with their lines, checked once the template is read.
  const std::vector<std::pair<std::string, int>>& called_names() const { return called_names_; }
  // While set, collects reads of `varargs` and `kwargs` in the macro being parsed.
  std::set<std::string>* macro_reads = nullptr;

 private:
  ExprPtr make(ExprKind kind, int line);
  void adopt(Expr& parent, ExprPtr child);
  ExprPtr literal(Value v, int line);
  ExprPtr binary(ExprKind kind, std::string op, int line, ExprPtr left, ExprPtr right);
  bool at_tuple_end() const;
  ExprPtr parse_condition();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_sequence(ExprKind kind, std::string_view close);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_call(ExprPtr node);
  void parse_call_args(Expr& call);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);

  TokenCursor& in_;
  std::vector<std::pair<std::string, int>> called_names_;
};

}  // namespace tpllama::jinja
