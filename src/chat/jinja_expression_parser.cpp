// Jinja2's expression grammar, lowest precedence first: see jinja_expression_parser.h.
#include "chat/jinja_expression_parser.h"

#include <algorithm>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"

namespace tpllama::jinja {
namespace {

constexpr std::string_view kCompareOps[] = {"==", "!=", "<", "<=", ">", ">="};

}  // namespace

void TokenCursor::expect_op(std::string_view op) {
  if (!skip_op(op)) error(peek(), "expected '", op, "', got ", describe(peek()));
}

std::string TokenCursor::expect_name() {
  if (peek().kind != TokenKind::kName) error(peek(), "expected a name, got ", describe(peek()));
  return next().text;
}

std::string TokenCursor::describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kEnd:
      return "end of template";
    case TokenKind::kBlockEnd:
      return "end of statement block";
    case TokenKind::kVariableEnd:
      return "end of print statement";
    case TokenKind::kData:
      return "template data";
    case TokenKind::kString:
      return "string";
    default:
      return "'" + t.text + "'";
  }
}

void TokenCursor::enter() {
  if (++nesting_ > kMaxParseNesting)
    error(peek(), "nesting deeper than ", kMaxParseNesting,
          " levels (tags, parentheses, brackets, signs and 'not's inside each other)");
}

// Every child passes here, so a tree deeper than the renderer and the destructor can afford is
// refused while it is built, chains (`a + b + ...`, `x|f|g...`) as well as nesting.
void ExpressionParser::adopt(Expr& parent, ExprPtr child) {
  if (child) {
    parent.depth = std::max(parent.depth, child->depth + 1);
    if (parent.depth > kMaxExpressionDepth)
      in_.error(
          in_.peek(), "expression nested more than ", kMaxExpressionDepth,
          " levels deep (operators, filters, subscripts and calls chained or inside each other)");
  }
  parent.children.push_back(std::move(child));
}

ExprPtr ExpressionParser::make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

bool ExpressionParser::at_tuple_end() const {
  const Token& t = in_.peek();
  return t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd ||
         TokenCursor::is_op(t, ")") || TokenCursor::is_name(t, "recursive");
}

ExprPtr ExpressionParser::parse_tuple(bool with_condexpr, bool explicit_parens) {
  const int line = in_.peek().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) in_.expect_op(",");
    if (at_tuple_end()) break;
    items.push_back(parse_expression(with_condexpr));
    if (!in_.at_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens)
      in_.error(in_.peek(), "expected an expression, got ", TokenCursor::describe(in_.peek()));
  }
  ExprPtr e = make(ExprKind::kTuple, line);
  e->children = std::move(items);
  return e;
}

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condition() : parse_or();
}

ExprPtr ExpressionParser::parse_condition() {
  ExprPtr value = parse_or();
  while (in_.at_name("if")) {
    ExprPtr e = make(ExprKind::kCondition, in_.next().line);
    ExprPtr condition = parse_or();
    ExprPtr otherwise;
    if (in_.skip_name("else")) {
      const NestingGuard nested(in_);  // `a if b else c if d else ...` recurses here
      otherwise = parse_condition();
    }
    adopt(*e, std::move(condition));
    adopt(*e, std::move(value));
    adopt(*e, std::move(otherwise));
    value = std::move(e);
  }
  return value;
}

ExprPtr ExpressionParser::binary(ExprKind kind, std::string op, int line, ExprPtr left,
                                 ExprPtr right) {
  ExprPtr e = make(kind, line);
  e->name = std::move(op);
  adopt(*e, std::move(left));
  adopt(*e, std::move(right));
  return e;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (in_.at_name("or")) {
    const int line = in_.next().line;
    left = binary(ExprKind::kOr, "or", line, std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (in_.at_name("and")) {
    const int line = in_.next().line;
    left = binary(ExprKind::kAnd, "and", line, std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (!in_.at_name("not")) return parse_compare();
  const NestingGuard nested(in_);
  ExprPtr e = make(ExprKind::kNot, in_.next().line);
  adopt(*e, parse_not());
  return e;
}

ExprPtr ExpressionParser::parse_compare() {
  const int line = in_.peek().line;
  ExprPtr first = parse_math1();
  ExprPtr e;
  while (true) {
    std::string op;
    const Token& t = in_.peek();
    if (t.kind == TokenKind::kOperator && std::find(std::begin(kCompareOps), std::end(kCompareOps),
                                                    t.text) != std::end(kCompareOps)) {
      op = in_.next().text;
    } else if (in_.skip_name("in")) {
      op = "in";
    } else if (TokenCursor::is_name(t, "not") && TokenCursor::is_name(in_.peek(1), "in")) {
      in_.skip(2);
      op = "notin";
    } else {
      break;
    }
    if (!e) {
      e = make(ExprKind::kCompare, line);
      adopt(*e, std::move(first));
    }
    e->compare_ops.push_back(op);
    adopt(*e, parse_math1());
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (in_.at_op("+") || in_.at_op("-")) {
    const Token& t = in_.next();
    left = binary(ExprKind::kBinary, t.text, t.line, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  ExprPtr left = parse_math2();
  while (in_.at_op("~")) {
    const int line = in_.next().line;
    left = binary(ExprKind::kBinary, "~", line, std::move(left), parse_math2());
  }
  return left;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (in_.at_op("*") || in_.at_op("/") || in_.at_op("//") || in_.at_op("%")) {
    const Token& t = in_.next();
    left = binary(ExprKind::kBinary, t.text, t.line, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (in_.at_op("**")) {
    const int line = in_.next().line;
    left = binary(ExprKind::kBinary, "**", line, std::move(left), parse_unary(true));
  }
  return left;
}

// Jinja binds a sign tighter than postfix and filters: `-x|abs` is abs(-x), `-2**2` is 4.
ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  const NestingGuard nested(in_);  // every nesting of ( [ { and signs passes here
  ExprPtr node;
  if (in_.at_op("-") || in_.at_op("+")) {
    const Token& t = in_.next();
    node = make(t.text == "-" ? ExprKind::kNegate : ExprKind::kPositive, t.line);
    adopt(*node, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

ExprPtr ExpressionParser::literal(Value v, int line) {
  ExprPtr e = make(ExprKind::kLiteral, line);
  e->literal = std::move(v);
  return e;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = in_.next();
  switch (t.kind) {
    case TokenKind::kName: {
      if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
      if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
      if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
      ExprPtr e = make(ExprKind::kName, t.line);
      e->name = t.text;
      if (macro_reads && (t.text == "varargs" || t.text == "kwargs")) macro_reads->insert(t.text);
      return e;
    }
    case TokenKind::kString: {
      std::string s = t.text;  // adjacent literals concatenate, as in Python
      while (in_.peek().kind == TokenKind::kString) s += in_.next().text;
      return literal(Value::string(std::move(s)), t.line);
    }
    case TokenKind::kInteger:
      return literal(Value::integer(t.int_value), t.line);
    case TokenKind::kFloat:
      return literal(Value::number(t.float_value), t.line);
    case TokenKind::kOperator:
      if (t.text == "(") {
        ExprPtr e = parse_tuple(true, true);
        in_.expect_op(")");
        return e;
      }
      if (t.text == "[") return parse_sequence(ExprKind::kList, "]");
      if (t.text == "{") return parse_sequence(ExprKind::kDict, "}");
      break;
    default:
      break;
  }
  in_.error(t, "unexpected ", TokenCursor::describe(t));
}

// A list literal, or a dict literal whose children alternate key and value.
ExprPtr ExpressionParser::parse_sequence(ExprKind kind, std::string_view close) {
  ExprPtr e = make(kind, in_.peek().line);
  while (!in_.skip_op(close)) {
    if (!e->children.empty()) {
      in_.expect_op(",");
      if (in_.skip_op(close)) break;
    }
    adopt(*e, parse_expression(true));
    if (kind == ExprKind::kDict) {
      in_.expect_op(":");
      adopt(*e, parse_expression(true));
    }
  }
  return e;
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (in_.at_op(".") || in_.at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (in_.at_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr node) {
  const Token& t = in_.next();
  if (t.text == ".") {
    const Token& attr = in_.next();
    if (attr.kind == TokenKind::kInteger) {
      ExprPtr e = make(ExprKind::kItem, attr.line);
      adopt(*e, std::move(node));
      adopt(*e, literal(Value::integer(attr.int_value), attr.line));
      return e;
    }
    if (attr.kind != TokenKind::kName)
      in_.error(attr, "expected an attribute name, got ", TokenCursor::describe(attr));
    ExprPtr e = make(ExprKind::kAttribute, attr.line);
    e->name = attr.text;
    adopt(*e, std::move(node));
    return e;
  }
  // `[`: an index or a slice start:stop:step, any part omitted.
  ExprPtr parts[3];
  bool is_slice = false;
  for (int i = 0; i < 3; ++i) {
    if (!in_.at_op(":") && !in_.at_op("]")) parts[i] = parse_expression(true);
    if (i == 2 || !in_.skip_op(":")) break;
    is_slice = true;
  }
  if (!is_slice && parts[0] && in_.at_op(",")) {
    // `x[a, b]` looks up the tuple (a, b), as Python does.
    ExprPtr key = make(ExprKind::kTuple, t.line);
    adopt(*key, std::move(parts[0]));
    while (in_.skip_op(",") && !in_.at_op("]")) adopt(*key, parse_expression(true));
    parts[0] = std::move(key);
  }
  in_.expect_op("]");
  ExprPtr e = make(is_slice ? ExprKind::kSlice : ExprKind::kItem, t.line);
  adopt(*e, std::move(node));
  if (!is_slice && !parts[0]) in_.error(t, "empty subscript");
  for (int i = 0; i < (is_slice ? 3 : 1); ++i) adopt(*e, std::move(parts[i]));
  return e;
}

ExprPtr ExpressionParser::parse_call(ExprPtr node) {
  const int line = in_.peek().line;
  ExprPtr e;
  if (node->kind == ExprKind::kAttribute) {
    if (!is_method(node->name)) in_.error(in_.peek(), "unsupported method '", node->name, "'");
    e = make(ExprKind::kMethodCall, line);
    e->name = node->name;
    adopt(*e, std::move(node->children[0]));
  } else {
    if (node->kind == ExprKind::kName) called_names_.emplace_back(node->name, line);
    e = make(ExprKind::kCall, line);
    adopt(*e, std::move(node));
  }
  parse_call_args(*e);
  return e;
}

// `(a, b, key=value)` appended to `call`'s children and kwargs.
void ExpressionParser::parse_call_args(Expr& call) {
  in_.expect_op("(");
  bool first = true;
  while (!in_.skip_op(")")) {
    if (!first) {
      in_.expect_op(",");
      if (in_.skip_op(")")) break;
    }
    first = false;
    if (in_.at_op("*") || in_.at_op("**"))
      in_.error(in_.peek(), "unsupported '", in_.peek().text, "' argument unpacking");
    if (in_.peek().kind == TokenKind::kName && TokenCursor::is_op(in_.peek(1), "=")) {
      std::string key = in_.next().text;
      in_.skip();
      ExprPtr value = parse_expression(true);
      call.depth = std::max(call.depth, value->depth + 1);
      call.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!call.kwargs.empty())
        in_.error(in_.peek(), "positional argument follows keyword argument");
      adopt(call, parse_expression(true));
    }
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (in_.at_op("|")) {
      node = parse_filter(std::move(node));
    } else if (in_.at_name("is")) {
      node = parse_test(std::move(node));
    } else if (in_.at_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_filter(ExprPtr node) {
  in_.skip();  // |
  const Token& t = in_.peek();
  std::string name = in_.expect_name();
  while (in_.skip_op(".")) name.append(".").append(in_.expect_name());
  ExprPtr e = make(ExprKind::kFilter, t.line);
  e->name = name;
  e->filter = find_filter(name);
  if (!e->filter) in_.error(t, "unknown filter '", name, "'");
  adopt(*e, std::move(node));
  if (in_.at_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
  in_.skip();  // is
  ExprPtr e = make(ExprKind::kTest, in_.peek().line);
  e->negated = in_.skip_name("not");
  const Token& t = in_.peek();
  std::string name = in_.expect_name();
  while (in_.skip_op(".")) name.append(".").append(in_.expect_name());
  e->name = name;
  e->test = find_test(name);
  if (!e->test) in_.error(t, "unknown test '", name, "'");
  adopt(*e, std::move(node));
  const Token& a = in_.peek();
  if (TokenCursor::is_op(a, "(")) {
    parse_call_args(*e);
  } else if ((a.kind == TokenKind::kName || a.kind == TokenKind::kString ||
              a.kind == TokenKind::kInteger || a.kind == TokenKind::kFloat ||
              TokenCursor::is_op(a, "[") || TokenCursor::is_op(a, "{")) &&
             !TokenCursor::is_name(a, "else") && !TokenCursor::is_name(a, "or") &&
             !TokenCursor::is_name(a, "and")) {
    // `x is divisibleby 3`: one argument without parentheses.
    if (TokenCursor::is_name(a, "is")) in_.error(a, "cannot chain tests with 'is'");
    adopt(*e, parse_postfix(parse_primary()));
  }
  if (!test_takes_argument(name) && (e->children.size() > 1 || !e->kwargs.empty()))
    in_.error(t, "test '", name, "' takes no arguments");
  return e;
}

}  // namespace tpllama::jinja
