// Recursive-descent parser with Jinja2's grammar and operator precedence: see jinja_parser.h.
#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <utility>

#include "chat/jinja_builtins.h"

namespace tpllama::jinja {
namespace {

constexpr std::string_view kCompareOps[] = {"==", "!=", "<", "<=", ">", ">="};

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kEnd: return "end of template";
    case TokenKind::kBlockEnd: return "end of statement block";
    case TokenKind::kVariableEnd: return "end of print statement";
    case TokenKind::kData: return "template data";
    case TokenKind::kString: return "string";
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin, const std::vector<std::string>& functions)
      : tokens_(std::move(tokens)), origin_(origin), functions_(functions.begin(), functions.end()) {
    for (const std::string& g : global_function_names()) functions_.insert(g);
  }

  Body parse() {
    Body body = parse_body({}, nullptr);
    for (const auto& [name, line] : called_names_) {
      if (!functions_.count(name) && !macro_names_.count(name))
        fail_at(origin_, line, "unknown function '", name, "' (not a macro or a known global)");
    }
    return body;
  }

 private:
  // ---- token stream ----
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  static bool is_op(const Token& t, std::string_view op) {
    return t.kind == TokenKind::kOperator && t.text == op;
  }
  static bool is_name(const Token& t, std::string_view name) {
    return t.kind == TokenKind::kName && t.text == name;
  }
  bool skip_op(std::string_view op) { return is_op(peek(), op) ? (++pos_, true) : false; }
  bool skip_name(std::string_view name) { return is_name(peek(), name) ? (++pos_, true) : false; }
  template <typename... Args>
  [[noreturn]] void error(const Token& at, Args&&... args) const {
    fail_at(origin_, at.line, std::forward<Args>(args)...);
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) error(peek(), "expected '", op, "', got ", describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) error(peek(), "expected a name, got ", describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) error(peek(), "expected end of statement block, got ", describe(peek()));
    ++pos_;
  }
  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Statements up to a tag named in `end_tags`, whose name is consumed and stored in `found`.
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string* found) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (end_tags.size() == 0) return body;
        error(t, "unexpected end of template, expected '", *std::prev(end_tags.end()), "'");
      }
      ++pos_;
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVariableBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        s->expr = parse_tuple(true, false);
        if (peek().kind != TokenKind::kVariableEnd) error(peek(), "expected end of print statement, got ", describe(peek()));
        ++pos_;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& tag = peek();
        if (tag.kind != TokenKind::kName) error(tag, "expected a tag name, got ", describe(tag));
        if (std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
          *found = next().text;
          return body;
        }
        parse_statement(body);
      } else {
        error(t, "unexpected ", describe(t));
      }
    }
  }

  void parse_statement(Body& body) {
    const Token& tag = next();
    const std::string& name = tag.text;
    if (name == "if") return body.push_back(parse_if(tag.line));
    if (name == "for") return body.push_back(parse_for(tag.line));
    if (name == "set") return body.push_back(parse_set(tag.line));
    if (name == "macro") return body.push_back(parse_macro(tag.line));
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error(tag, "'", name, "' outside a for loop");
      expect_block_end();
      auto s = std::make_unique<Stmt>();
      s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s->line = tag.line;
      return body.push_back(std::move(s));
    }
    if (name == "generation") {
      // Hugging Face's AssistantTracker tag: it only records where the text went.
      expect_block_end();
      std::string end;
      for (auto& s : parse_body({"endgeneration"}, &end)) body.push_back(std::move(s));
      return expect_block_end();
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else")
      error(tag, "unexpected tag '", name, "'");
    error(tag, "unsupported tag '", name, "'");
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kIf;
    s->line = line;
    // As in Jinja, an if condition cannot be an inline `a if b else c` without parentheses.
    ExprPtr condition = parse_tuple(false, false);
    while (true) {
      expect_block_end();
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(condition), std::move(body));
      if (end == "endif") break;
      if (end == "else") {
        expect_block_end();
        Body else_body = parse_body({"endif"}, &end);
        s->branches.emplace_back(nullptr, std::move(else_body));
        break;
      }
      condition = parse_tuple(false, false);
    }
    expect_block_end();
    return s;
  }

  // Names for `for` and `set` targets: `x`, `a, b` or `(a, b)`.
  std::vector<std::string> parse_targets() {
    const bool parens = skip_op("(");
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) {
      if (peek().kind != TokenKind::kName) break;
      names.push_back(expect_name());
    }
    if (parens) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFor;
    s->line = line;
    s->targets = parse_targets();
    if (!skip_name("in")) error(peek(), "expected 'in' in for loop, got ", describe(peek()));
    s->expr = parse_tuple(false, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name(peek(), "recursive")) error(peek(), "unsupported loop modifier 'recursive'");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    s->body = parse_body({"else", "endfor"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (peek().kind == TokenKind::kName && is_op(peek(1), ".")) {
      s->kind = StmtKind::kSetAttribute;
      s->targets.push_back(next().text);
      ++pos_;
      s->text = expect_name();
    } else {
      s->kind = StmtKind::kSet;
      s->targets = parse_targets();
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (s->kind != StmtKind::kSet || s->targets.size() != 1) error(peek(), "expected '=' in set, got ", describe(peek()));
    if (is_op(peek(), "|")) error(peek(), "unsupported filter on a block set");
    expect_block_end();
    s->kind = StmtKind::kSetBlock;
    std::string end;
    s->body = parse_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kMacro;
    s->line = line;
    s->text = expect_name();
    macro_names_.insert(s->text);
    expect_op("(");
    while (!skip_op(")")) {
      if (!s->params.empty()) expect_op(",");
      const Token& p = peek();
      std::string param = expect_name();
      ExprPtr fallback;
      if (skip_op("=")) {
        fallback = parse_expression(true);
      } else if (!s->params.empty() && s->params.back().second) {
        error(p, "non-default argument '", param, "' follows default argument");
      }
      macro_names_.insert(param);  // a parameter may carry a macro to call
      s->params.emplace_back(std::move(param), std::move(fallback));
    }
    expect_block_end();
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    std::set<std::string> reads;
    std::set<std::string>* outer_reads = std::exchange(macro_reads_, &reads);
    std::string end;
    s->body = parse_body({"endmacro"}, &end);
    macro_reads_ = outer_reads;
    loop_depth_ = outer_loops;
    s->uses_varargs = reads.count("varargs") > 0;
    s->uses_kwargs = reads.count("kwargs") > 0;
    skip_name(s->text);
    expect_block_end();
    return s;
  }

  // ---- expressions, lowest precedence first ----

  bool at_tuple_end() const {
    const Token& t = peek();
    return t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || is_op(t, ")") ||
           is_name(t, "recursive");
  }

  // A comma list becomes a tuple: `{{ a, b }}`, `{% set x = 1, 2 %}`, `for x in a, b`.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end()) break;
      items.push_back(parse_expression(with_condexpr));
      if (!is_op(peek(), ",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) error(peek(), "expected an expression, got ", describe(peek()));
    }
    ExprPtr e = make(ExprKind::kTuple, line);
    e->children = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condition() : parse_or();
  }

  ExprPtr parse_condition() {
    ExprPtr value = parse_or();
    while (is_name(peek(), "if")) {
      ExprPtr e = make(ExprKind::kCondition, next().line);
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condition() : nullptr;
      e->children.push_back(std::move(condition));
      e->children.push_back(std::move(value));
      e->children.push_back(std::move(otherwise));
      value = std::move(e);
    }
    return value;
  }

  ExprPtr binary(ExprKind kind, std::string op, int line, ExprPtr left, ExprPtr right) {
    ExprPtr e = make(kind, line);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name(peek(), "or")) {
      const int line = next().line;
      left = binary(ExprKind::kOr, "or", line, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name(peek(), "and")) {
      const int line = next().line;
      left = binary(ExprKind::kAnd, "and", line, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (!is_name(peek(), "not")) return parse_compare();
    ExprPtr e = make(ExprKind::kNot, next().line);
    e->children.push_back(parse_not());
    return e;
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.kind == TokenKind::kOperator &&
          std::find(std::begin(kCompareOps), std::end(kCompareOps), t.text) != std::end(kCompareOps)) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name(t, "not") && is_name(peek(1), "in")) {
        pos_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!e) {
        e = make(ExprKind::kCompare, line);
        e->children.push_back(std::move(first));
      }
      e->compare_ops.push_back(op);
      e->children.push_back(parse_math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op(peek(), "+") || is_op(peek(), "-")) {
      const Token& t = next();
      left = binary(ExprKind::kBinary, t.text, t.line, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op(peek(), "~")) {
      const int line = next().line;
      left = binary(ExprKind::kBinary, "~", line, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op(peek(), "*") || is_op(peek(), "/") || is_op(peek(), "//") || is_op(peek(), "%")) {
      const Token& t = next();
      left = binary(ExprKind::kBinary, t.text, t.line, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op(peek(), "**")) {
      const int line = next().line;
      left = binary(ExprKind::kBinary, "**", line, std::move(left), parse_unary(true));
    }
    return left;
  }

  // Jinja binds a sign tighter than postfix and filters: `-x|abs` is abs(-x), `-2**2` is 4.
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op(peek(), "-") || is_op(peek(), "+")) {
      const Token& t = next();
      node = make(t.text == "-" ? ExprKind::kNegate : ExprKind::kPositive, t.line);
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
  }

  ExprPtr literal(Value v, int line) {
    ExprPtr e = make(ExprKind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_primary();
  ExprPtr parse_sequence(ExprKind kind, std::string_view close);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_call(ExprPtr node);
  void parse_call_args(Expr& call);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const std::string& origin_;
  std::set<std::string> functions_;
  std::set<std::string> macro_names_;
  std::vector<std::pair<std::string, int>> called_names_;
  int loop_depth_ = 0;
  std::set<std::string>* macro_reads_ = nullptr;  // varargs / kwargs read by the macro being parsed
};

ExprPtr Parser::parse_primary() {
  const Token& t = next();
  switch (t.kind) {
    case TokenKind::kName: {
      if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
      if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
      if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
      ExprPtr e = make(ExprKind::kName, t.line);
      e->name = t.text;
      if (macro_reads_ && (t.text == "varargs" || t.text == "kwargs")) macro_reads_->insert(t.text);
      return e;
    }
    case TokenKind::kString: {
      std::string s = t.text;  // adjacent literals concatenate, as in Python
      while (peek().kind == TokenKind::kString) s += next().text;
      return literal(Value::string(std::move(s)), t.line);
    }
    case TokenKind::kInteger: return literal(Value::integer(t.int_value), t.line);
    case TokenKind::kFloat: return literal(Value::number(t.float_value), t.line);
    case TokenKind::kOperator:
      if (t.text == "(") {
        ExprPtr e = parse_tuple(true, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") return parse_sequence(ExprKind::kList, "]");
      if (t.text == "{") return parse_sequence(ExprKind::kDict, "}");
      break;
    default: break;
  }
  error(t, "unexpected ", describe(t));
}

// A list literal, or a dict literal whose children alternate key and value.
ExprPtr Parser::parse_sequence(ExprKind kind, std::string_view close) {
  ExprPtr e = make(kind, peek().line);
  while (!skip_op(close)) {
    if (!e->children.empty()) {
      expect_op(",");
      if (skip_op(close)) break;
    }
    e->children.push_back(parse_expression(true));
    if (kind == ExprKind::kDict) {
      expect_op(":");
      e->children.push_back(parse_expression(true));
    }
  }
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(peek(), ".") || is_op(peek(), "[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op(peek(), "(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& attr = next();
    if (attr.kind == TokenKind::kInteger) {
      ExprPtr e = make(ExprKind::kItem, attr.line);
      e->children.push_back(std::move(node));
      e->children.push_back(literal(Value::integer(attr.int_value), attr.line));
      return e;
    }
    if (attr.kind != TokenKind::kName) error(attr, "expected an attribute name, got ", describe(attr));
    ExprPtr e = make(ExprKind::kAttribute, attr.line);
    e->name = attr.text;
    e->children.push_back(std::move(node));
    return e;
  }
  // `[`: an index or a slice start:stop:step, any part omitted.
  ExprPtr parts[3];
  bool is_slice = false;
  for (int i = 0; i < 3; ++i) {
    if (!is_op(peek(), ":") && !is_op(peek(), "]")) parts[i] = parse_expression(true);
    if (i == 2 || !skip_op(":")) break;
    is_slice = true;
  }
  if (!is_slice && parts[0] && is_op(peek(), ",")) {
    // `x[a, b]` looks up the tuple (a, b), as Python does.
    ExprPtr key = make(ExprKind::kTuple, t.line);
    key->children.push_back(std::move(parts[0]));
    while (skip_op(",") && !is_op(peek(), "]")) key->children.push_back(parse_expression(true));
    parts[0] = std::move(key);
  }
  expect_op("]");
  ExprPtr e = make(is_slice ? ExprKind::kSlice : ExprKind::kItem, t.line);
  e->children.push_back(std::move(node));
  if (!is_slice && !parts[0]) error(t, "empty subscript");
  for (int i = 0; i < (is_slice ? 3 : 1); ++i) e->children.push_back(std::move(parts[i]));
  return e;
}

ExprPtr Parser::parse_call(ExprPtr node) {
  const int line = peek().line;
  ExprPtr e;
  if (node->kind == ExprKind::kAttribute) {
    if (!is_method(node->name)) error(peek(), "unsupported method '", node->name, "'");
    e = make(ExprKind::kMethodCall, line);
    e->name = node->name;
    e->children.push_back(std::move(node->children[0]));
  } else {
    if (node->kind == ExprKind::kName) called_names_.emplace_back(node->name, line);
    e = make(ExprKind::kCall, line);
    e->children.push_back(std::move(node));
  }
  parse_call_args(*e);
  return e;
}

// `(a, b, key=value)` appended to `call`'s children and kwargs.
void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!skip_op(")")) {
    if (!first) {
      expect_op(",");
      if (skip_op(")")) break;
    }
    first = false;
    if (is_op(peek(), "*") || is_op(peek(), "**")) error(peek(), "unsupported '", peek().text, "' argument unpacking");
    if (peek().kind == TokenKind::kName && is_op(peek(1), "=")) {
      std::string key = next().text;
      ++pos_;
      call.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!call.kwargs.empty()) error(peek(), "positional argument follows keyword argument");
      call.children.push_back(parse_expression(true));
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op(peek(), "|")) {
      node = parse_filter(std::move(node));
    } else if (is_name(peek(), "is")) {
      node = parse_test(std::move(node));
    } else if (is_op(peek(), "(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter(ExprPtr node) {
  ++pos_;  // |
  const Token& t = peek();
  std::string name = expect_name();
  while (skip_op(".")) name += "." + expect_name();
  ExprPtr e = make(ExprKind::kFilter, t.line);
  e->name = name;
  e->filter = find_filter(name);
  if (!e->filter) error(t, "unknown filter '", name, "'");
  e->children.push_back(std::move(node));
  if (is_op(peek(), "(")) parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  ++pos_;  // is
  ExprPtr e = make(ExprKind::kTest, peek().line);
  e->negated = skip_name("not");
  const Token& t = peek();
  std::string name = expect_name();
  while (skip_op(".")) name += "." + expect_name();
  e->name = name;
  e->test = find_test(name);
  if (!e->test) error(t, "unknown test '", name, "'");
  e->children.push_back(std::move(node));
  const Token& a = peek();
  if (is_op(a, "(")) {
    parse_call_args(*e);
  } else if ((a.kind == TokenKind::kName || a.kind == TokenKind::kString || a.kind == TokenKind::kInteger ||
              a.kind == TokenKind::kFloat || is_op(a, "[") || is_op(a, "{")) &&
             !is_name(a, "else") && !is_name(a, "or") && !is_name(a, "and")) {
    // `x is divisibleby 3`: one argument without parentheses.
    if (is_name(a, "is")) error(a, "cannot chain tests with 'is'");
    e->children.push_back(parse_postfix(parse_primary()));
  }
  if (!test_takes_argument(name) && (e->children.size() > 1 || !e->kwargs.empty()))
    error(t, "test '", name, "' takes no arguments");
  return e;
}

}  // namespace

Body parse_template(std::string_view source, const std::string& origin, const LexOptions& options,
                    const std::vector<std::string>& functions) {
  return Parser(tokenize(source, origin, options), origin, functions).parse();
}

}  // namespace tpllama::jinja
