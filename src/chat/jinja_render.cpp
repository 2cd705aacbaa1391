// Renders the syntax tree with Jinja2's scoping: each loop iteration and each macro call gets its
// own frame, `if` does not; `{% set %}` writes to the innermost frame, namespaces are shared.
#include <algorithm>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_template.h"

namespace tpllama::jinja {
namespace {

using Frame = std::vector<std::pair<std::string, Value>>;
enum class Flow { kNormal, kBreak, kContinue };

// Python's recursion limit stops a runaway macro; this stops ours before the C++ stack does.
constexpr int kMaxMacroDepth = 200;

class Renderer {
 public:
  Renderer(const Variables& variables, RenderLimits limits) : root_(variables), budget_(limits) {
    for (const std::string& name : global_function_names()) {
      const bool shadowed =
          std::any_of(root_.begin(), root_.end(), [&](const auto& v) { return v.first == name; });
      if (!shadowed) root_.emplace_back(name, global_function(name));
    }
    scopes_.push_back(&root_);
  }

  void run(const Body& body, std::string& out) {
    BudgetScope scope(budget_);
    out_ = &out;
    exec(body);
  }

 private:
  const Value* find(const std::string& name) const {
    for (auto frame = scopes_.rbegin(); frame != scopes_.rend(); ++frame)
      for (const auto& [key, value] : **frame)
        if (key == name) return &value;
    return nullptr;
  }

  Value lookup(const std::string& name) const {
    const Value* v = find(name);
    return v ? *v : Value::undefined("'" + name + "' is undefined");
  }

  static void assign(Frame& frame, const std::string& name, Value value) {
    for (auto& [key, v] : frame) {
      if (key == name) {
        v = std::move(value);
        return;
      }
    }
    frame.emplace_back(name, std::move(value));
  }

  // `a, b = value` unpacks exactly as many items of a list, tuple, str or dict.
  static void bind(Frame& frame, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) return assign(frame, targets[0], value);
    if (!value.is_list() && !value.is_string() && !value.is_dict())
      throw EvalError("cannot unpack non-iterable " + type_name(value) + " object");
    const std::vector<Value> items = iterate(value);
    if (items.size() < targets.size()) {
      throw EvalError("not enough values to unpack (expected " + std::to_string(targets.size()) +
                      ", got " + std::to_string(items.size()) + ")");
    }
    if (items.size() > targets.size())
      throw EvalError("too many values to unpack (expected " + std::to_string(targets.size()) +
                      ")");
    for (size_t i = 0; i < targets.size(); ++i) assign(frame, targets[i], items[i]);
  }

  Flow exec(const Body& body) {
    for (const auto& stmt : body) {
      const Flow flow = exec_stmt(*stmt);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // Counts one level of evaluation while alive, and one step of the budget.
  class Nested {
   public:
    explicit Nested(Renderer& r) : r_(r) {
      r.budget_.step();
      if (++r.depth_ > kMaxRenderDepth) {
        --r.depth_;  // the destructor of a constructor that throws does not run
        throw EvalError("the template nests more than " + std::to_string(kMaxRenderDepth) +
                        " statements, expressions and macro calls inside each other");
      }
    }
    ~Nested() { --r_.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Renderer& r_;
  };

  void write(const std::string& text) {
    budget_.charge(text.size());
    *out_ += text;
  }

  Flow exec_stmt(const Stmt& s) {
    try {
      const Nested nested(*this);  // inside: its errors get this line too
      return exec_kind(s);
    } catch (EvalError& e) {
      if (e.line == 0) e.line = s.line;
      throw;
    }
  }

  Flow exec_kind(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::kData:
        write(s.text);
        break;
      case StmtKind::kOutput: {
        const Value v = eval(*s.expr);
        write(v.is_string() ? v.as_string() : to_str(v));
        break;
      }
      case StmtKind::kIf:
        for (const auto& [condition, body] : s.branches)
          if (!condition || truthy(eval(*condition))) return exec(body);
        break;
      case StmtKind::kFor:
        return exec_for(s);
      case StmtKind::kSet:
        bind(*scopes_.back(), s.targets, eval(*s.expr));
        break;
      case StmtKind::kSetAttribute: {
        const Value target = lookup(s.targets[0]);
        if (target.kind() != Value::Kind::kNamespace)
          throw EvalError("cannot assign attribute '" + s.text + "' on non-namespace object '" +
                          s.targets[0] + "'");
        Value value = eval(*s.expr);
        check_namespace_attribute(s.text, value);
        target.as_namespace().attributes.set(Value::string(s.text), std::move(value));
        break;
      }
      case StmtKind::kSetBlock:
        assign(*scopes_.back(), s.targets[0], Value::string(capture(s.body)));
        break;
      case StmtKind::kMacro:
        assign(*scopes_.back(), s.text, Value::callable(s.text, [this, &s](const CallArgs& args) {
          return call_macro(s, args);
        }));
        break;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  std::string capture(const Body& body) {
    std::string text;
    std::string* outer = out_;
    out_ = &text;
    exec(body);
    out_ = outer;
    return text;
  }

  // The items a loop visits: the list itself when nothing filters it, so `loop.previtem` is free.
  std::shared_ptr<const ListObj> loop_items(const Stmt& s) {
    const Value iterable = eval(*s.expr);
    if (iterable.is_list() && !s.filter) return iterable.list_ptr();
    std::vector<Value> kept;
    for (Value& item : iterate(iterable)) {
      if (s.filter) {
        Frame frame;
        bind(frame, s.targets, item);
        scopes_.push_back(&frame);
        const bool keep = truthy(eval(*s.filter));
        scopes_.pop_back();
        if (!keep) continue;
      }
      kept.push_back(std::move(item));
    }
    return Value::list(std::move(kept)).list_ptr();
  }

  Flow exec_for(const Stmt& s) {
    const std::shared_ptr<const ListObj> items = loop_items(s);
    if (items->items.empty()) {
      Frame frame;
      scopes_.push_back(&frame);
      exec(s.else_body);
      scopes_.pop_back();
      return Flow::kNormal;
    }
    for (size_t i = 0; i < items->items.size(); ++i) {
      budget_.step();  // an empty body costs a step too
      Frame frame;
      bind(frame, s.targets, items->items[i]);
      auto loop = std::make_shared<LoopObj>();
      loop->items = items;
      loop->index0 = static_cast<std::int64_t>(i);
      frame.emplace_back("loop", Value::loop(std::move(loop)));
      scopes_.push_back(&frame);
      const Flow flow = exec(s.body);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value call_macro(const Stmt& m, const CallArgs& args);
  CallArgs eval_args(const Expr& e, size_t first);
  Value eval(const Expr& e) {
    try {
      const Nested nested(*this);  // inside: its errors get this line too
      return eval_kind(e);
    } catch (EvalError& err) {
      if (err.line == 0) err.line = e.line;
      throw;
    }
  }
  Value eval_kind(const Expr& e);
  Value eval_display(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_logic(const Expr& e);
  bool compare_op(const std::string& op, const Value& a, const Value& b);

  Frame root_;
  std::vector<Frame*> scopes_;
  std::string* out_ = nullptr;
  int macro_depth_ = 0;
  int depth_ = 0;
  RenderBudget budget_;
};

// A macro sees its parameters, `varargs`, `kwargs` and the template's top level, not its caller.
Value Renderer::call_macro(const Stmt& m, const CallArgs& args) {
  if (macro_depth_ >= kMaxMacroDepth)
    throw EvalError("maximum recursion depth exceeded in macro '" + m.text + "'");
  Frame frame;
  std::vector<Value> varargs;
  std::vector<bool> bound(m.params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i >= m.params.size()) {
      if (!m.uses_varargs) {
        throw EvalError("macro '" + m.text + "' takes not more than " +
                        std::to_string(m.params.size()) + " argument(s)");
      }
      varargs.push_back(args.positional[i]);
      continue;
    }
    frame.emplace_back(m.params[i].first, args.positional[i]);
    bound[i] = true;
  }
  DictObj kwargs;
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find_if(m.params.begin(), m.params.end(),
                                 [&](const auto& p) { return p.first == key; });
    if (it == m.params.end()) {
      if (!m.uses_kwargs)
        throw EvalError("macro '" + m.text + "' takes no keyword argument '" + key + "'");
      kwargs.set(Value::string(key), value);
      continue;
    }
    const auto i = static_cast<size_t>(it - m.params.begin());
    if (bound[i])
      throw EvalError("macro '" + m.text + "' got multiple values for argument '" + key + "'");
    frame.emplace_back(key, value);
    bound[i] = true;
  }
  frame.emplace_back("varargs", Value::list(std::move(varargs), true));
  frame.emplace_back("kwargs", Value::dict(std::move(kwargs)));
  std::vector<Frame*> caller_scopes = {&root_, &frame};
  std::swap(scopes_, caller_scopes);
  // Defaults are evaluated at call time and may use the parameters before them.
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (bound[i]) continue;
    const auto& [name, fallback] = m.params[i];
    frame.emplace_back(name, fallback
                                 ? eval(*fallback)
                                 : Value::undefined("parameter '" + name + "' was not provided"));
  }
  ++macro_depth_;
  std::string text = capture(m.body);
  --macro_depth_;
  std::swap(scopes_, caller_scopes);
  return Value::string(std::move(text));
}

CallArgs Renderer::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  args.positional.reserve(e.children.size() - first);
  for (size_t i = first; i < e.children.size(); ++i)
    args.positional.push_back(eval(*e.children[i]));
  for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, eval(*value));
  return args;
}

bool Renderer::compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  const int c = compare(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value Renderer::eval_kind(const Expr& e) {
  const auto& c = e.children;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return eval_display(e);
    case ExprKind::kAttribute:
      return get_attribute(eval(*c[0]), e.name);
    case ExprKind::kItem:
      return get_item(eval(*c[0]), eval(*c[1]));
    case ExprKind::kSlice: {
      auto part = [&](size_t i) { return c[i] ? eval(*c[i]) : Value::none(); };
      return get_slice(eval(*c[0]), part(1), part(2), part(3));
    }
    case ExprKind::kCall:
    case ExprKind::kMethodCall:
    case ExprKind::kFilter:
    case ExprKind::kTest:
      return eval_call(e);
    case ExprKind::kNot:
      return Value::boolean(!truthy(eval(*c[0])));
    case ExprKind::kNegate:
      return unary_op("-", eval(*c[0]));
    case ExprKind::kPositive:
      return unary_op("+", eval(*c[0]));
    case ExprKind::kBinary: {
      const Value a = eval(*c[0]);
      return binary_op(e.name, a, eval(*c[1]));
    }
    case ExprKind::kAnd:
    case ExprKind::kOr:
    case ExprKind::kCompare:
    case ExprKind::kCondition:
      return eval_logic(e);
  }
  return Value();
}

// List, tuple and dict literals.
Value Renderer::eval_display(const Expr& e) {
  const auto& c = e.children;
  if (e.kind == ExprKind::kDict) {
    DictObj d;
    for (size_t i = 0; i + 1 < c.size(); i += 2) {
      Value key = eval(*c[i]);
      check_hashable(key);
      d.set(std::move(key), eval(*c[i + 1]));
    }
    return Value::dict(std::move(d));
  }
  std::vector<Value> items;
  items.reserve(c.size());
  for (const auto& child : c) items.push_back(eval(*child));
  return Value::list(std::move(items), e.kind == ExprKind::kTuple);
}

// Calls of macros and globals, methods, filters and tests.
Value Renderer::eval_call(const Expr& e) {
  const Value subject = eval(*e.children[0]);
  const CallArgs args = eval_args(e, 1);
  switch (e.kind) {
    case ExprKind::kMethodCall:
      return call_method(subject, e.name, args);
    case ExprKind::kFilter:
      return e.filter(subject, args);
    case ExprKind::kTest:
      return Value::boolean(e.test(subject, args) != e.negated);
    default:
      break;
  }
  if (subject.kind() == Value::Kind::kCallable) return subject.as_callable().fn(args);
  if (subject.is_undefined()) throw EvalError(subject.undefined_hint());
  throw EvalError("'" + type_name(subject) + "' object is not callable");
}

// and / or (which return an operand, as in Python), chained comparisons, `a if c else b`.
Value Renderer::eval_logic(const Expr& e) {
  const auto& c = e.children;
  if (e.kind == ExprKind::kAnd || e.kind == ExprKind::kOr) {
    Value a = eval(*c[0]);
    return truthy(a) == (e.kind == ExprKind::kAnd) ? eval(*c[1]) : a;
  }
  if (e.kind == ExprKind::kCompare) {
    Value left = eval(*c[0]);
    for (size_t i = 0; i < e.compare_ops.size(); ++i) {
      Value right = eval(*c[i + 1]);
      if (!compare_op(e.compare_ops[i], left, right)) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }
  if (truthy(eval(*c[0]))) return eval(*c[1]);
  if (c[2]) return eval(*c[2]);
  return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                          " evaluated to false and no else section was defined.");
}

}  // namespace

Template::Template(std::string_view text, std::string origin, TemplateOptions options)
    : origin_(std::move(origin)),
      body_(std::make_unique<Body>(
          parse_template(text, origin_, LexOptions{options.trim_blocks, options.lstrip_blocks},
                         options.functions))) {}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Variables& variables, RenderLimits limits) const {
  std::string out;
  try {
    Renderer(variables, limits).run(*body_, out);
  } catch (const EvalError& e) {
    throw RenderError(origin_ + " line " + std::to_string(e.line) + ": " + e.what(), e.line);
  }
  return out;
}

}  // namespace tpllama::jinja
