// Template statements (if, for, set, macro, ...) on top of the expression parser: see
// jinja_parser.h. Anything the subset lacks is refused here, with its line.
#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <utility>

#include "chat/jinja_builtins.h"
#include "chat/jinja_expression_parser.h"

namespace tpllama::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin,
         const std::vector<std::string>& functions)
      : in_(std::move(tokens), origin),
        origin_(origin),
        functions_(functions.begin(), functions.end()) {
    for (const std::string& g : global_function_names()) functions_.insert(g);
  }

  Body parse() {
    Body body = parse_body({}, nullptr);
    for (const auto& [name, line] : expr_.called_names()) {
      if (!functions_.count(name) && !macro_names_.count(name))
        fail_at(origin_, line, "unknown function '", name, "' (not a macro or a known global)");
    }
    return body;
  }

 private:
  void expect_block_end() {
    if (in_.peek().kind != TokenKind::kBlockEnd)
      in_.error(in_.peek(), "expected end of statement block, got ",
                TokenCursor::describe(in_.peek()));
    in_.skip();
  }

  // ---- statements ----

  // Statements up to a tag named in `end_tags`, whose name is consumed and stored in `found`.
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string* found) {
    Body body;
    while (true) {
      const Token& t = in_.peek();
      if (t.kind == TokenKind::kEnd) {
        if (end_tags.size() == 0) return body;
        in_.error(t, "unexpected end of template, expected '", *std::prev(end_tags.end()), "'");
      }
      in_.skip();
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
        s->expr = expr_.parse_tuple(true, false);
        if (in_.peek().kind != TokenKind::kVariableEnd)
          in_.error(in_.peek(), "expected end of print statement, got ",
                    TokenCursor::describe(in_.peek()));
        in_.skip();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& tag = in_.peek();
        if (tag.kind != TokenKind::kName)
          in_.error(tag, "expected a tag name, got ", TokenCursor::describe(tag));
        if (std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
          *found = in_.next().text;
          return body;
        }
        parse_statement(body);
      } else {
        in_.error(t, "unexpected ", TokenCursor::describe(t));
      }
    }
  }

  void parse_statement(Body& body) {
    const Token& tag = in_.next();
    const NestingGuard nested(in_);  // a tag's body is parsed inside it
    const std::string& name = tag.text;
    if (name == "if") return body.push_back(parse_if(tag.line));
    if (name == "for") return body.push_back(parse_for(tag.line));
    if (name == "set") return body.push_back(parse_set(tag.line));
    if (name == "macro") return body.push_back(parse_macro(tag.line));
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) in_.error(tag, "'", name, "' outside a for loop");
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
      in_.error(tag, "unexpected tag '", name, "'");
    in_.error(tag, "unsupported tag '", name, "'");
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kIf;
    s->line = line;
    // As in Jinja, an if condition cannot be an inline `a if b else c` without parentheses.
    ExprPtr condition = expr_.parse_tuple(false, false);
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
      condition = expr_.parse_tuple(false, false);
    }
    expect_block_end();
    return s;
  }

  // Names for `for` and `set` targets: `x`, `a, b` or `(a, b)`.
  std::vector<std::string> parse_targets() {
    const bool parens = in_.skip_op("(");
    std::vector<std::string> names{in_.expect_name()};
    while (in_.skip_op(",")) {
      if (in_.peek().kind != TokenKind::kName) break;
      names.push_back(in_.expect_name());
    }
    if (parens) in_.expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFor;
    s->line = line;
    s->targets = parse_targets();
    if (!in_.skip_name("in"))
      in_.error(in_.peek(), "expected 'in' in for loop, got ", TokenCursor::describe(in_.peek()));
    s->expr = expr_.parse_tuple(false, false);
    if (in_.skip_name("if")) s->filter = expr_.parse_expression(true);
    if (in_.at_name("recursive")) in_.error(in_.peek(), "unsupported loop modifier 'recursive'");
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
    if (in_.peek().kind == TokenKind::kName && TokenCursor::is_op(in_.peek(1), ".")) {
      s->kind = StmtKind::kSetAttribute;
      s->targets.push_back(in_.next().text);
      in_.skip();
      s->text = in_.expect_name();
    } else {
      s->kind = StmtKind::kSet;
      s->targets = parse_targets();
    }
    if (in_.skip_op("=")) {
      s->expr = expr_.parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (s->kind != StmtKind::kSet || s->targets.size() != 1)
      in_.error(in_.peek(), "expected '=' in set, got ", TokenCursor::describe(in_.peek()));
    if (in_.at_op("|")) in_.error(in_.peek(), "unsupported filter on a block set");
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
    s->text = in_.expect_name();
    macro_names_.insert(s->text);
    in_.expect_op("(");
    while (!in_.skip_op(")")) {
      if (!s->params.empty()) in_.expect_op(",");
      const Token& p = in_.peek();
      std::string param = in_.expect_name();
      ExprPtr fallback;
      if (in_.skip_op("=")) {
        fallback = expr_.parse_expression(true);
      } else if (!s->params.empty() && s->params.back().second) {
        in_.error(p, "non-default argument '", param, "' follows default argument");
      }
      macro_names_.insert(param);  // a parameter may carry a macro to call
      s->params.emplace_back(std::move(param), std::move(fallback));
    }
    expect_block_end();
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    std::set<std::string> reads;
    std::set<std::string>* outer_reads = std::exchange(expr_.macro_reads, &reads);
    std::string end;
    s->body = parse_body({"endmacro"}, &end);
    expr_.macro_reads = outer_reads;
    loop_depth_ = outer_loops;
    s->uses_varargs = reads.count("varargs") > 0;
    s->uses_kwargs = reads.count("kwargs") > 0;
    in_.skip_name(s->text);
    expect_block_end();
    return s;
  }

  TokenCursor in_;
  ExpressionParser expr_{in_};
  const std::string& origin_;
  std::set<std::string> functions_;
  std::set<std::string> macro_names_;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const std::string& origin, const LexOptions& options,
                    const std::vector<std::string>& functions) {
  return Parser(tokenize(source, origin, options), origin, functions).parse();
}

}  // namespace tpllama::jinja
