// The values of the Jinja subset: Python's None, bool, int, float, str, list, tuple and dict, plus
// Jinja's Undefined, namespace objects, callables (macros and globals) and the loop object.
// Dicts keep insertion order, as Python's do, so `tojson` and iteration match Jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpllama::jinja {

struct ListObj;
struct DictObj;
struct NamespaceObj;
struct Callable;
struct LoopObj;
struct CallArgs;

// A failure while evaluating; the renderer adds the template line it happened on.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& what) : std::runtime_error(what) {}
  int line = 0;
};

class Value {
 public:
  enum class Kind : std::uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
    kLoop
  };

  Value() : data_(Undefined{}) {}  // undefined, with no hint
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(std::int64_t i) { return Value(i); }
  static Value number(double d) { return Value(d); }
  // Strings are shared between copies of a value: a copy costs no memory, so the bytes a render
  // builds (jinja_limits.h) bound the memory it holds.
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(DictObj d);
  static Value name_space(std::shared_ptr<NamespaceObj> ns) { return Value(std::move(ns)); }
  static Value callable(std::string name, std::function<Value(const CallArgs&)> fn);
  static Value loop(std::shared_ptr<const LoopObj> l) { return Value(std::move(l)); }

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  // Python's numbers: bool is an int.
  bool is_number() const { return kind() == Kind::kBool || kind() == Kind::kInt || is_float(); }
  bool is_integral() const { return kind() == Kind::kBool || kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }

  // Why this value is undefined, as Jinja words it ("'x' is undefined"); empty when unknown.
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }
  bool as_bool() const { return std::get<bool>(data_); }
  // An int, or a bool as 0/1; throws EvalError for other kinds, as Python's index checks do.
  std::int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const {
    return *std::get<std::shared_ptr<const std::string>>(data_);
  }
  const ListObj& as_list() const { return *std::get<std::shared_ptr<const ListObj>>(data_); }
  const std::shared_ptr<const ListObj>& list_ptr() const {
    return std::get<std::shared_ptr<const ListObj>>(data_);
  }
  const DictObj& as_dict() const { return *std::get<std::shared_ptr<const DictObj>>(data_); }
  NamespaceObj& as_namespace() const { return *std::get<std::shared_ptr<NamespaceObj>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const LoopObj& as_loop() const { return *std::get<std::shared_ptr<const LoopObj>>(data_); }
  // Same object, for containers and namespaces (Jinja's `sameas`).
  bool same_object(const Value& other) const;

 private:
  struct Undefined {
    std::string hint;
  };
  struct None {};
  using Data = std::variant<Undefined, None, bool, std::int64_t, double,
                            std::shared_ptr<const std::string>, std::shared_ptr<const ListObj>,
                            std::shared_ptr<const DictObj>, std::shared_ptr<NamespaceObj>,
                            std::shared_ptr<const Callable>, std::shared_ptr<const LoopObj>>;
  template <typename T>
  explicit Value(T v) : data_(std::move(v)) {}
  Data data_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;                 // containers inside each other, this one included
  bool holds_namespace = false;  // a namespace among the items, or inside them
};

// Keys compare as Python's do (1 == 1.0 == True); lookup is linear, dicts in chat data are small.
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;  // as ListObj's, set by Value::dict
  bool holds_namespace = false;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// namespace(): the one mutable object, so `{% set ns.x = ... %}` is seen outside a loop. It may
// not hold a namespace (see check_namespace_attribute): no cycles, no chains of unbounded depth.
struct NamespaceObj {
  DictObj attributes;
};

// Throws EvalError when `value` may not become a namespace attribute: a namespace itself or a
// container holding one (no real template nests them), or one nested deeper than kMaxValueDepth.
void check_namespace_attribute(const std::string& name, const Value& value);

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

// The `loop` variable of one iteration. Its depth is always 1: only recursive loops, which the
// subset lacks, nest in Jinja's sense.
struct LoopObj {
  std::shared_ptr<const ListObj> items;
  std::int64_t index0 = 0;
  std::int64_t length() const { return static_cast<std::int64_t>(items->items.size()); }
};

// Python type names, for error messages: 'str', 'NoneType', 'dict', ...
std::string type_name(const Value& v);
// Jinja's words for an object in "... has no attribute" messages: 'dict object', 'None'.
std::string object_description(const Value& v);

// Python str(), except that Undefined renders as empty (Jinja's default Undefined).
std::string to_str(const Value& v);
// Python repr(), as used when a list or dict is rendered.
std::string to_repr(const Value& v);
bool truthy(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=: negative, zero or positive; throws EvalError for types Python
// cannot order ("'<' not supported between instances of 'str' and 'int'").
int compare(const Value& a, const Value& b, std::string_view op);

// JSON (from the caller's messages, tools and extras) to values; object key order is kept.
Value from_json(const nlohmann::ordered_json& j);

// json.dumps options, as Hugging Face's `tojson` filter passes them.
struct JsonStyle {
  std::optional<std::string> indent;  // none: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python's json.dumps(v, ...) text; throws EvalError for values JSON cannot hold (Undefined).
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace tpllama::jinja
