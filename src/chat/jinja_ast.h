// The syntax tree the parser builds and the renderer walks. Filters and tests are resolved to
// functions when the template loads, so a name the subset lacks never reaches rendering.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace tpllama::jinja {

using FilterFn = Value (*)(const Value& input, const CallArgs& args);
using TestFn = bool (*)(const Value& input, const CallArgs& args);

enum class ExprKind {
  kLiteral,     // literal
  kName,        // name
  kList,        // [children...]
  kTuple,       // (children...)
  kDict,        // {children[0]: children[1], ...}
  kAttribute,   // children[0].name
  kItem,        // children[0][children[1]]
  kSlice,       // children[0][children[1]:children[2]:children[3]]; omitted parts are null
  kCall,        // children[0](children[1...], kwargs)
  kMethodCall,  // children[0].name(children[1...], kwargs)
  kFilter,      // children[0] | name(children[1...], kwargs)
  kTest,        // children[0] is [not] name(children[1...])
  kNot,         // not children[0]
  kNegate,      // -children[0]
  kPositive,    // +children[0]
  kBinary,      // children[0] name children[1], name one of + - * / // % ** ~
  kAnd,         // children[0] and children[1]
  kOr,          // children[0] or children[1]
  kCompare,     // children[0] compare_ops[0] children[1] compare_ops[1] children[2] ...
  kCondition,   // children[1] if children[0] else children[2]; children[2] null without else
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  std::string name;
  Value literal;
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> compare_ops;  // == != < <= > >= in notin
  FilterFn filter = nullptr;
  TestFn test = nullptr;
  bool negated = false;  // `is not`
  int depth = 1;         // of this tree, set as children are added (jinja_expression_parser.cpp)
};
using ExprPtr = std::unique_ptr<Expr>;

enum class StmtKind {
  kData,          // text
  kOutput,        // {{ expr }}
  kIf,            // branches
  kFor,           // for targets in expr [if filter]: body [else: else_body]
  kSet,           // set targets = expr
  kSetAttribute,  // set targets[0].text = expr (a namespace attribute)
  kSetBlock,      // set targets[0]: body rendered to a string
  kMacro,         // macro text(params): body
  kBreak,
  kContinue,
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;  // data, the attribute of kSetAttribute, the macro's name
  ExprPtr expr;
  std::vector<std::string> targets;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;  // condition (null for else) and its body
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters, default or null
  // A macro accepts extra positional / keyword arguments only when its body reads them.
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

}  // namespace tpllama::jinja
