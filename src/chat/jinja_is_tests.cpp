// The `is` tests of the Jinja subset (`x is defined`, `n is divisibleby 3`), with Jinja2's
// results for every input type: Undefined is iterable and callable, bool counts as a number.
#include <algorithm>
#include <iterator>
#include <string_view>

#include "chat/jinja_builtins.h"
#include "chat/jinja_text.h"

namespace tpllama::jinja {
namespace {

bool test_defined(const Value& v, const CallArgs&) {
  return !v.is_undefined();
}
bool test_undefined(const Value& v, const CallArgs&) {
  return v.is_undefined();
}
bool test_none(const Value& v, const CallArgs&) {
  return v.is_none();
}
bool test_string(const Value& v, const CallArgs&) {
  return v.is_string();
}
bool test_mapping(const Value& v, const CallArgs&) {
  return v.is_dict();
}
bool test_number(const Value& v, const CallArgs&) {
  return v.is_number();
}
bool test_integer(const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kInt;
}
bool test_float(const Value& v, const CallArgs&) {
  return v.is_float();
}
bool test_boolean(const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kBool;
}
bool test_true(const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kBool && v.as_bool();
}
bool test_false(const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kBool && !v.as_bool();
}
// Jinja's Undefined iterates (as nothing) and has a length, so it passes both.
bool test_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
         v.kind() == Value::Kind::kLoop;
}
bool test_sequence(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
// Undefined is callable in Jinja (calling it raises).
bool test_callable(const Value& v, const CallArgs&) {
  return v.kind() == Value::Kind::kCallable || v.is_undefined();
}
bool test_lower(const Value& v, const CallArgs&) {
  return text::is_lower(to_str(v));
}
bool test_upper(const Value& v, const CallArgs&) {
  return text::is_upper(to_str(v));
}

// Jinja's tests compute value % divisor as Python does, floats included: `odd` is `% 2 == 1`.
bool remainder_is(const Value& v, const Value& divisor, std::int64_t expected) {
  return equals(binary_op("%", v, divisor), Value::integer(expected));
}
bool test_even(const Value& v, const CallArgs&) {
  return remainder_is(v, Value::integer(2), 0);
}
bool test_odd(const Value& v, const CallArgs&) {
  return remainder_is(v, Value::integer(2), 1);
}
bool test_divisibleby(const Value& v, const CallArgs& args) {
  BoundArgs a(args, {"num"}, "divisibleby");
  return remainder_is(v, a.get(0, Value::integer(1)), 0);
}

const Value& test_operand(const CallArgs& args, const char* test) {
  BoundArgs a(args, {"other"}, test);
  if (!a.given(0)) throw EvalError(std::string(test) + " test needs a value to compare with");
  return args.positional.empty() ? args.keyword[0].second : args.positional[0];
}
bool test_eq(const Value& v, const CallArgs& args) {
  return equals(v, test_operand(args, "eq"));
}
bool test_ne(const Value& v, const CallArgs& args) {
  return !equals(v, test_operand(args, "ne"));
}
bool test_lt(const Value& v, const CallArgs& args) {
  return compare(v, test_operand(args, "lt"), "<") < 0;
}
bool test_le(const Value& v, const CallArgs& args) {
  return compare(v, test_operand(args, "le"), "<=") <= 0;
}
bool test_gt(const Value& v, const CallArgs& args) {
  return compare(v, test_operand(args, "gt"), ">") > 0;
}
bool test_ge(const Value& v, const CallArgs& args) {
  return compare(v, test_operand(args, "ge"), ">=") >= 0;
}
bool test_in(const Value& v, const CallArgs& args) {
  return contains(test_operand(args, "in"), v);
}
bool test_sameas(const Value& v, const CallArgs& args) {
  return v.same_object(test_operand(args, "sameas"));
}

template <typename Fn>
struct Named {
  std::string_view name;
  Fn fn;
};

constexpr Named<TestFn> kTests[] = {
    {"boolean", test_boolean},
    {"callable", test_callable},
    {"defined", test_defined},
    {"divisibleby", test_divisibleby},
    {"eq", test_eq},
    {"equalto", test_eq},
    {"==", test_eq},
    {"even", test_even},
    {"false", test_false},
    {"float", test_float},
    {"ge", test_ge},
    {">=", test_ge},
    {"gt", test_gt},
    {"greaterthan", test_gt},
    {">", test_gt},
    {"in", test_in},
    {"integer", test_integer},
    {"iterable", test_iterable},
    {"le", test_le},
    {"<=", test_le},
    {"lower", test_lower},
    {"lt", test_lt},
    {"lessthan", test_lt},
    {"<", test_lt},
    {"mapping", test_mapping},
    {"ne", test_ne},
    {"!=", test_ne},
    {"none", test_none},
    {"number", test_number},
    {"odd", test_odd},
    {"sameas", test_sameas},
    {"sequence", test_sequence},
    {"string", test_string},
    {"true", test_true},
    {"undefined", test_undefined},
    {"upper", test_upper},
};

}  // namespace

bool test_takes_argument(std::string_view name) {
  static constexpr std::string_view kWithArgument[] = {
      "divisibleby", "eq", "equalto", "==",          "ne", "!=", "lt", "lessthan", "<",
      "le",          "<=", "gt",      "greaterthan", ">",  "ge", ">=", "in",       "sameas"};
  return std::find(std::begin(kWithArgument), std::end(kWithArgument), name) !=
         std::end(kWithArgument);
}

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace tpllama::jinja
