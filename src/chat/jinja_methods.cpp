// Object access for the Jinja subset: argument binding, iteration, `in`, attribute / item / slice
// lookup with Jinja's Undefined rules, the str / dict / loop methods, and Jinja's globals.
#include <algorithm>
#include <string_view>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_text.h"
#include "core/utf8.h"

namespace tpllama::jinja {

BoundArgs::BoundArgs(const CallArgs& args, std::initializer_list<std::string_view> params,
                     std::string_view function)
    : values_(params.size()), given_(params.size(), false) {
  if (args.positional.size() > params.size()) {
    throw EvalError(std::string(function) + "() takes at most " + std::to_string(params.size()) +
                    " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = args.positional[i];
    given_[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end())
      throw EvalError(std::string(function) + "() got an unexpected keyword argument '" + key +
                      "'");
    const auto i = static_cast<size_t>(it - params.begin());
    if (given_[i])
      throw EvalError(std::string(function) + "() got multiple values for argument '" + key + "'");
    values_[i] = value;
    given_[i] = true;
  }
}

Value BoundArgs::get(size_t i, Value fallback) const {
  return given_[i] ? values_[i] : std::move(fallback);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& item : v.as_dict().items) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (const std::string_view cp : text::code_points(v.as_string()))
        chars.push_back(Value::string(std::string(cp)));
      return chars;
    }
    default:
      throw EvalError("'" + type_name(v) + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        throw EvalError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.as_list().items.begin(), container.as_list().items.end(),
                         [&](const Value& v) { return equals(v, item); });
    case Value::Kind::kDict:
      check_hashable(item);
      return container.as_dict().find(item) != nullptr;
    default:
      throw EvalError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

void check_hashable(const Value& key) {
  if (key.is_dict() || (key.is_list() && !key.as_list().is_tuple))
    throw EvalError("unhashable type: '" + type_name(key) + "'");
  if (key.is_list())
    for (const Value& item : key.as_list().items) check_hashable(item);
}

namespace {

Value no_attribute(const Value& object, const std::string& name) {
  std::string hint = "'";
  hint.append(object_description(object)).append("' has no attribute '").append(name).append("'");
  return Value::undefined(std::move(hint));
}

Value loop_attribute(const LoopObj& l, const std::string& name) {
  const std::int64_t n = l.length();
  const auto& items = l.items->items;
  if (name == "index") return Value::integer(l.index0 + 1);
  if (name == "index0") return Value::integer(l.index0);
  if (name == "revindex") return Value::integer(n - l.index0);
  if (name == "revindex0") return Value::integer(n - l.index0 - 1);
  if (name == "first") return Value::boolean(l.index0 == 0);
  if (name == "last") return Value::boolean(l.index0 == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") {
    return l.index0 > 0 ? items[static_cast<size_t>(l.index0 - 1)]
                        : Value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return l.index0 + 1 < n ? items[static_cast<size_t>(l.index0 + 1)]
                            : Value::undefined("there is no next item");
  }
  return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
}

// Python's index normalisation for a sequence of `n`: negative counts from the end.
bool normalize_index(std::int64_t& i, size_t n) {
  if (i < 0) i += static_cast<std::int64_t>(n);
  return i >= 0 && i < static_cast<std::int64_t>(n);
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      throw EvalError(object.undefined_hint());
    case Value::Kind::kDict: {
      const Value* v = object.as_dict().find(name);
      return v ? *v : no_attribute(object, name);
    }
    case Value::Kind::kNamespace: {
      const Value* v = object.as_namespace().attributes.find(name);
      return v ? *v : no_attribute(object, name);
    }
    case Value::Kind::kLoop:
      return loop_attribute(object.as_loop(), name);
    default:
      return no_attribute(object, name);
  }
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) throw EvalError(object.undefined_hint());
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(key)) return *v;
  } else if (object.is_list() && key.is_integral()) {
    std::int64_t i = key.as_int();
    const auto& items = object.as_list().items;
    if (normalize_index(i, items.size())) return items[static_cast<size_t>(i)];
  } else if (object.is_string() && key.is_integral()) {
    const auto cps = text::code_points(object.as_string());
    std::int64_t i = key.as_int();
    if (normalize_index(i, cps.size()))
      return Value::string(std::string(cps[static_cast<size_t>(i)]));
  } else if (key.is_string()) {
    return get_attribute(object, key.as_string());  // Jinja falls back from item to attribute
  }
  if (key.is_string()) return no_attribute(object, key.as_string());
  // Built by appending: GCC 12 takes the chained operator+ here for an overlapping copy
  // (-Wrestrict).
  std::string message = "'";
  message += object_description(object);
  message += "' has no element ";
  message += to_repr(key);
  return Value::undefined(message);
}

namespace {

std::int64_t slice_bound(const Value& v, std::int64_t fallback) {
  if (v.is_none() || v.is_undefined()) return fallback;
  if (!v.is_integral())
    throw EvalError("slice indices must be integers or None, not " + type_name(v));
  return v.as_int();
}

// The indices Python's slice(start, stop, step) picks from a sequence of n.
std::vector<size_t> slice_indices(const Value& start, const Value& stop, const Value& step,
                                  size_t n) {
  const std::int64_t s = slice_bound(step, 1);
  if (s == 0) throw EvalError("slice step cannot be zero");
  const auto len = static_cast<std::int64_t>(n);
  const std::int64_t lower = s > 0 ? 0 : -1;
  const std::int64_t upper = s > 0 ? len : len - 1;
  auto clamp = [&](const Value& v, std::int64_t fallback) {
    std::int64_t i = slice_bound(v, fallback);
    if (v.is_none() || v.is_undefined()) return i;
    if (i < 0) i += len;
    return std::clamp(i, lower, upper);
  };
  const std::int64_t first = clamp(start, s > 0 ? lower : upper);
  const std::int64_t last = clamp(stop, s > 0 ? upper : lower);
  std::vector<size_t> out;
  for (std::int64_t i = first; s > 0 ? i < last : i > last;) {
    out.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, s, &i)) break;  // a step past 64 bits is past the end too
  }
  return out;
}

}  // namespace

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) throw EvalError(object.undefined_hint());
  if (object.is_list()) {
    const ListObj& l = object.as_list();
    std::vector<Value> out;
    for (const size_t i : slice_indices(start, stop, step, l.items.size()))
      out.push_back(l.items[i]);
    return Value::list(std::move(out), l.is_tuple);
  }
  if (object.is_string()) {
    const auto cps = text::code_points(object.as_string());
    std::string out;
    for (const size_t i : slice_indices(start, stop, step, cps.size())) out += cps[i];
    return Value::string(std::move(out));
  }
  // Jinja compiles a slice to a plain Python subscript, so unlike an index it raises.
  if (object.is_dict()) throw EvalError("unhashable type: 'slice'");
  throw EvalError("'" + type_name(object) + "' object is not subscriptable");
}

namespace {

constexpr std::string_view kStringMethods[] = {
    "strip", "lstrip", "rstrip",     "split",   "startswith", "endswith", "upper",
    "lower", "title",  "capitalize", "replace", "find",       "count",    "join"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};

bool one_of(std::string_view name, const std::string_view* begin, const std::string_view* end) {
  return std::find(begin, end, name) != end;
}

// `prefix` may be a str or a tuple of them, as for Python's startswith / endswith.
bool affix_matches(const std::string& s, const Value& affix, bool at_start) {
  if (affix.is_list()) {
    return std::any_of(affix.as_list().items.begin(), affix.as_list().items.end(),
                       [&](const Value& a) { return affix_matches(s, a, at_start); });
  }
  if (!affix.is_string())
    throw EvalError("startswith/endswith first arg must be str or a tuple of str, not " +
                    type_name(affix));
  const std::string& a = affix.as_string();
  if (a.size() > s.size()) return false;
  return at_start ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

// The str a str method's argument must be, as Python insists ("must be str, not int").
const std::string& str_argument(const Value& v, const std::string& method) {
  if (!v.is_string()) throw EvalError(method + "() argument must be str, not " + type_name(v));
  return v.as_string();
}

Value strip_method(const std::string& s, const CallArgs& args, const std::string& name) {
  BoundArgs a(args, {"chars"}, name);
  const bool left = name != "rstrip";
  const bool right = name != "lstrip";
  const Value chars = a.get(0, Value::none());
  if (chars.is_none()) return Value::string(text::strip(s, left, right));
  return Value::string(text::strip_chars(s, str_argument(chars, name), left, right));
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") return strip_method(s, args, name);
  if (name == "split") {
    BoundArgs a(args, {"sep", "maxsplit"}, name);
    const Value sep = a.get(0, Value::none());
    const std::int64_t maxsplit = a.get(1, Value::integer(-1)).as_int();
    if (sep.is_none()) return string_list(text::split_whitespace(s, maxsplit));
    if (str_argument(sep, name).empty()) throw EvalError("empty separator");
    return string_list(text::split(s, sep.as_string(), maxsplit));
  }
  if (name == "startswith" || name == "endswith") {
    BoundArgs a(args, {"prefix"}, name);
    return Value::boolean(affix_matches(s, a.get(0, Value::none()), name == "startswith"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    BoundArgs a(args, {}, name);
    if (name == "upper") return Value::string(text::upper(s));
    if (name == "lower") return Value::string(text::lower(s));
    return Value::string(name == "title" ? text::title(s) : text::capitalize(s));
  }
  if (name == "replace") {
    BoundArgs a(args, {"old", "new", "count"}, name);
    if (!a.given(0) || !a.given(1)) throw EvalError("replace() needs the old and the new string");
    return Value::string(text::replace(s, str_argument(a[0], name), str_argument(a[1], name),
                                       a.get(2, Value::integer(-1)).as_int()));
  }
  if (name == "find" || name == "count") {
    BoundArgs a(args, {"sub"}, name);
    const std::string& sub = str_argument(a[0], name);
    if (name == "count" && sub.empty())
      return Value::integer(static_cast<std::int64_t>(utf8::count(s) + 1));
    if (name == "count")
      return Value::integer(static_cast<std::int64_t>(text::split(s, sub, -1).size() - 1));
    const size_t at = s.find(sub);
    if (at == std::string::npos) return Value::integer(-1);
    return Value::integer(
        static_cast<std::int64_t>(utf8::count(std::string_view(s).substr(0, at))));
  }
  // join
  BoundArgs a(args, {"iterable"}, name);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(a[0])) {
    if (!item.is_string())
      throw EvalError("sequence item: expected str instance, " + type_name(item) + " found");
    if (!first) out += s;
    first = false;
    out += item.as_string();
    check_bytes(out.size());  // a long separator between many items multiplies its size
  }
  return Value::string(std::move(out));
}

Value dict_method(const DictObj& d, const std::string& name, const CallArgs& args) {
  if (name == "get") {
    BoundArgs a(args, {"key", "default"}, name);
    const Value* v = d.find(a[0]);
    return v ? *v : a.get(1, Value::none());
  }
  BoundArgs a(args, {}, name);
  std::vector<Value> out;
  for (const auto& [k, v] : d.items) {
    if (name == "items")
      out.push_back(Value::list({k, v}, true));
    else
      out.push_back(name == "keys" ? k : v);
  }
  return Value::list(std::move(out));
}

// list.count(x) / list.index(x): the two list methods that do not modify the list.
Value list_method(const ListObj& l, const std::string& name, const CallArgs& args) {
  BoundArgs a(args, {"value"}, name);
  std::int64_t count = 0;
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (!equals(l.items[i], a[0])) continue;
    if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
    ++count;
  }
  if (name == "index") throw EvalError(to_repr(a[0]) + " is not in list");
  return Value::integer(count);
}

}  // namespace

bool is_method(std::string_view name) {
  return one_of(name, std::begin(kStringMethods), std::end(kStringMethods)) ||
         one_of(name, std::begin(kDictMethods), std::end(kDictMethods)) || name == "cycle" ||
         name == "index";
}

Value call_method(const Value& object, const std::string& name, const CallArgs& args) {
  if (object.is_undefined()) throw EvalError(object.undefined_hint());
  if (object.is_string() && one_of(name, std::begin(kStringMethods), std::end(kStringMethods)))
    return string_method(object.as_string(), name, args);
  if (object.is_dict() && one_of(name, std::begin(kDictMethods), std::end(kDictMethods)))
    return dict_method(object.as_dict(), name, args);
  if (object.is_list() && (name == "count" || name == "index"))
    return list_method(object.as_list(), name, args);
  if (object.kind() == Value::Kind::kLoop && name == "cycle") {
    if (args.positional.empty()) throw EvalError("no items for cycling given");
    const auto n = static_cast<std::int64_t>(args.positional.size());
    return args.positional[static_cast<size_t>(object.as_loop().index0 % n)];
  }
  throw EvalError("'" + object_description(object) + "' has no attribute '" + name + "'");
}

namespace {

Value make_namespace(const CallArgs& args) {
  auto ns = std::make_shared<NamespaceObj>();
  for (const Value& v : args.positional) {
    if (!v.is_dict())
      throw EvalError("namespace() takes a dict or keyword arguments, not " + type_name(v));
    for (const auto& [k, x] : v.as_dict().items) {
      check_namespace_attribute(to_str(k), x);
      ns->attributes.set(k, x);
    }
  }
  for (const auto& [k, v] : args.keyword) {
    check_namespace_attribute(k, v);
    ns->attributes.set(Value::string(k), v);
  }
  return Value::name_space(std::move(ns));
}

Value make_range(const CallArgs& args) {
  BoundArgs a(args, {"start", "stop", "step"}, "range");
  if (!a.given(0)) throw EvalError("range expected at least 1 argument, got 0");
  for (size_t i = 0; i < 3; ++i)
    if (a.given(i) && !a[i].is_integral())
      throw EvalError("range() argument must be an int, not " + type_name(a[i]));
  const std::int64_t start = a.given(1) ? a[0].as_int() : 0;
  const std::int64_t stop = a.given(1) ? a[1].as_int() : a[0].as_int();
  const std::int64_t step = a.given(2) ? a[2].as_int() : 1;
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
    // The sandbox's limit, so a runaway template fails instead of exhausting memory.
    if (out.size() >= 100000)
      throw EvalError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // the next value is past the 64-bit stop
  }
  return Value::list(std::move(out));
}

Value make_dict(const CallArgs& args) {
  DictObj d;
  for (const Value& v : args.positional) {
    if (!v.is_dict())
      throw EvalError("dict() takes a dict or keyword arguments, not " + type_name(v));
    for (const auto& [k, x] : v.as_dict().items) d.set(k, x);
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return Value::dict(std::move(d));
}

}  // namespace

const std::vector<std::string>& global_function_names() {
  static const std::vector<std::string> kNames = {"namespace", "range", "dict"};
  return kNames;
}

Value global_function(const std::string& name) {
  if (name == "namespace") return Value::callable(name, make_namespace);
  if (name == "range") return Value::callable(name, make_range);
  return Value::callable(name, make_dict);
}

}  // namespace tpllama::jinja
