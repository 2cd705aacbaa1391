// Filters, tests, methods and global functions of the Jinja subset. The parser looks names up
// here, so a template that uses anything else is refused when it loads.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace tpllama::jinja {

// Null when the subset has no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// Whether a test takes a value to compare with (`is divisibleby 3`); the others take none.
bool test_takes_argument(std::string_view name);

// Methods of str, dict and the loop object (`s.strip()`, `d.items()`, `loop.cycle(a, b)`).
bool is_method(std::string_view name);
Value call_method(const Value& object, const std::string& name, const CallArgs& args);

// Python iteration: list items, dict keys, str code points; nothing for Undefined; throws
// EvalError for anything else ("'int' object is not iterable").
std::vector<Value> iterate(const Value& v);
// Python refuses lists and dicts as dict keys ("unhashable type: 'list'").
void check_hashable(const Value& key);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// Jinja's `obj.name` and `obj[key]`: a missing attribute, key or index is Undefined; only looking
// into Undefined itself throws.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// Python's obj[start:stop:step]; each bound may be none.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Python's arithmetic: + - * / // % ** with ints, floats, str and list repetition and
// concatenation; `~` joins the str() of both sides. Undefined operands throw (except for `~`).
Value binary_op(std::string_view op, const Value& a, const Value& b);
// Unary minus / plus on a number.
Value unary_op(std::string_view op, const Value& v);

// Jinja's own globals: namespace(), range(), dict().
const std::vector<std::string>& global_function_names();
Value global_function(const std::string& name);

// A call's arguments bound to a signature, as Python binds them: positional first, then by name.
class BoundArgs {
 public:
  BoundArgs(const CallArgs& args, std::initializer_list<std::string_view> params,
            std::string_view function);
  bool given(size_t i) const { return given_[i]; }
  const Value& operator[](size_t i) const { return values_[i]; }
  // The argument, or `fallback` when it was not passed. By value: the fallback is often a
  // temporary.
  Value get(size_t i, Value fallback) const;

 private:
  std::vector<Value> values_;
  std::vector<bool> given_;
};

}  // namespace tpllama::jinja
