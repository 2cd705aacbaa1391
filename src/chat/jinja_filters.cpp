// The filters of the Jinja subset, with Jinja2's semantics on every input type (Undefined
// included); `tojson` is Hugging Face's: json.dumps with ensure_ascii=False and no key sorting.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_text.h"
#include "core/utf8.h"

namespace tpllama::jinja {
namespace {

// ---- filters ----

Value filter_trim(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"chars"}, "trim");
  const Value chars = a.get(0, Value::none());
  if (chars.is_none()) return Value::string(text::strip(to_str(in), true, true));
  return Value::string(text::strip_chars(to_str(in), to_str(chars), true, true));
}

Value filter_length(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "length");
  switch (in.kind()) {
    case Value::Kind::kUndefined:
      return Value::integer(0);
    case Value::Kind::kString:
      return Value::integer(static_cast<std::int64_t>(utf8::count(in.as_string())));
    case Value::Kind::kList:
      return Value::integer(static_cast<std::int64_t>(in.as_list().items.size()));
    case Value::Kind::kDict:
      return Value::integer(static_cast<std::int64_t>(in.as_dict().items.size()));
    default:
      throw EvalError("object of type '" + type_name(in) + "' has no len()");
  }
}

Value filter_tojson(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonStyle style;
  style.ensure_ascii = truthy(a.get(0, Value::boolean(false)));
  const Value indent = a.get(1, Value::none());
  if (indent.is_integral()) {
    const auto width = static_cast<size_t>(std::max<std::int64_t>(0, indent.as_int()));
    check_bytes(width);
    style.indent = std::string(width, ' ');
  } else if (indent.is_string()) {
    style.indent = indent.as_string();
  } else if (!indent.is_none()) {
    throw EvalError("tojson indent must be an int or a string, not " + type_name(indent));
  }
  // json.dumps drops the space after ',' when it indents, unless separators are given.
  if (style.indent) style.item_separator = ",";
  const Value separators = a.get(2, Value::none());
  if (!separators.is_none()) {
    const bool pair = separators.is_list() && separators.as_list().items.size() == 2 &&
                      separators.as_list().items[0].is_string() &&
                      separators.as_list().items[1].is_string();
    if (!pair)
      throw EvalError("tojson separators must be a pair of strings, got " + to_repr(separators));
    style.item_separator = separators.as_list().items[0].as_string();
    style.key_separator = separators.as_list().items[1].as_string();
  }
  style.sort_keys = truthy(a.get(3, Value::boolean(false)));
  return Value::string(to_json(in, style));
}

Value filter_upper(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "upper");
  return Value::string(text::upper(to_str(in)));
}

Value filter_lower(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "lower");
  return Value::string(text::lower(to_str(in)));
}

Value filter_capitalize(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "capitalize");
  return Value::string(text::capitalize(to_str(in)));
}

// Jinja's title filter, unlike str.title(), starts words only after spaces, '-', and openers.
Value filter_title(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "title");
  const std::string s = to_str(in);
  std::string out;
  bool word_start = true;
  for (const std::string_view cp : text::code_points(s)) {
    size_t i = 0;
    const char32_t c = utf8::decode(cp, i);
    if (text::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      out += cp;
      word_start = true;
    } else {
      out += word_start ? text::upper(cp) : text::lower(cp);
      word_start = false;
    }
  }
  return Value::string(std::move(out));
}

Value filter_default(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"default_value", "boolean"}, "default");
  const bool use_default =
      in.is_undefined() || (truthy(a.get(1, Value::boolean(false))) && !truthy(in));
  return use_default ? a.get(0, Value::string("")) : in;
}

Value filter_join(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"d", "attribute"}, "join");
  const std::string separator = to_str(a.get(0, Value::string("")));
  const Value attribute = a.get(1, Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in)) {
    if (!first) out += separator;
    first = false;
    out += to_str(attribute.is_none() ? item : get_attribute(item, to_str(attribute)));
    check_bytes(out.size());  // a long separator between many items multiplies its size
  }
  return Value::string(std::move(out));
}

Value filter_first(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "first");
  std::vector<Value> items = iterate(in);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "last");
  std::vector<Value> items = iterate(in);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_replace(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"old", "new", "count"}, "replace");
  if (!a.given(0) || !a.given(1)) throw EvalError("replace() needs the old and the new string");
  const Value count = a.get(2, Value::none());
  return Value::string(
      text::replace(to_str(in), to_str(a[0]), to_str(a[1]), count.is_none() ? -1 : count.as_int()));
}

Value filter_string(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "string");
  return in.is_string() ? in : Value::string(to_str(in));
}

// Python's float() of a str: surrounding whitespace allowed, the whole rest must parse.
bool parse_float(const std::string& s, double& out) {
  const std::string t = text::strip(s, true, true);
  if (t.empty() || t.find('_') != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

// Python's int(float), which is exact for any size; ours refuses what 64 bits cannot hold.
std::int64_t truncate_to_int(double d) {
  const double t = std::trunc(d);
  if (t < -0x1p63 || t >= 0x1p63)
    throw EvalError("int(): " + to_str(Value::number(d)) + " is beyond 64 bits");
  return static_cast<std::int64_t>(t);
}

Value filter_int(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"default", "base"}, "int");
  if (in.is_undefined()) throw EvalError(in.undefined_hint());
  if (in.is_integral()) return Value::integer(in.as_int());
  if (in.is_float() && std::isfinite(in.as_double()))
    return Value::integer(truncate_to_int(in.as_double()));
  if (in.is_string()) {
    const std::string t = text::strip(in.as_string(), true, true);
    char* end = nullptr;
    errno = 0;
    const long long v =
        std::strtoll(t.c_str(), &end, static_cast<int>(a.get(1, Value::integer(10)).as_int()));
    if (!t.empty() && end == t.c_str() + t.size()) {
      if (errno == ERANGE) throw EvalError("int(): '" + t + "' is beyond 64 bits");
      return Value::integer(v);
    }
    double d = 0;
    if (parse_float(t, d) && std::isfinite(d)) return Value::integer(truncate_to_int(d));
  }
  return a.get(0, Value::integer(0));
}

Value filter_float(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"default"}, "float");
  if (in.is_undefined()) throw EvalError(in.undefined_hint());
  if (in.is_number()) return Value::number(in.as_double());
  double d = 0;
  if (in.is_string() && parse_float(in.as_string(), d)) return Value::number(d);
  return a.get(0, Value::number(0.0));
}

Value filter_list(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "list");
  return Value::list(iterate(in));
}

Value filter_items(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "items");
  if (in.is_undefined()) return Value::list({});
  if (!in.is_dict())
    throw EvalError("Can only get item pairs from a mapping, not " + type_name(in));
  std::vector<Value> pairs;
  for (const auto& [k, v] : in.as_dict().items) pairs.push_back(Value::list({k, v}, true));
  return Value::list(std::move(pairs));
}

// select / reject / selectattr / rejectattr: keep items whose test (or truth) is `keep`.
Value select_items(const Value& in, const CallArgs& args, bool keep, bool by_attribute) {
  const size_t skip = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty())
    throw EvalError("selectattr/rejectattr need an attribute name");
  TestFn test = nullptr;
  CallArgs test_args;
  if (args.positional.size() > skip) {
    const std::string name = to_str(args.positional[skip]);
    test = find_test(name);
    if (!test) throw EvalError("no test named '" + name + "'");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(skip) + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const Value& item : iterate(in)) {
    const Value subject = by_attribute ? get_attribute(item, to_str(args.positional[0])) : item;
    const bool passed = test ? test(subject, test_args) : truthy(subject);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_select(const Value& in, const CallArgs& args) {
  return select_items(in, args, true, false);
}
Value filter_reject(const Value& in, const CallArgs& args) {
  return select_items(in, args, false, false);
}
Value filter_selectattr(const Value& in, const CallArgs& args) {
  return select_items(in, args, true, true);
}
Value filter_rejectattr(const Value& in, const CallArgs& args) {
  return select_items(in, args, false, true);
}

// map(attribute='x', default=...) or map('filter', args...).
Value filter_map(const Value& in, const CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    BoundArgs a(args, {"attribute", "default"}, "map");
    if (!a.given(0)) throw EvalError("map() needs a filter name or attribute=");
    for (const Value& item : iterate(in)) {
      Value v = get_attribute(item, to_str(a[0]));
      out.push_back(v.is_undefined() && a.given(1) ? a[1] : std::move(v));
    }
    return Value::list(std::move(out));
  }
  const std::string name = to_str(args.positional[0]);
  const FilterFn filter = find_filter(name);
  if (!filter) throw EvalError("no filter named '" + name + "'");
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : iterate(in)) out.push_back(filter(item, rest));
  return Value::list(std::move(out));
}

// Jinja's Markup is a str subclass, so `safe` makes a string of anything.
Value filter_safe(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "safe");
  return in.is_string() ? in : Value::string(to_str(in));
}

Value filter_reverse(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "reverse");
  if (in.is_string()) return get_slice(in, Value::none(), Value::none(), Value::integer(-1));
  std::vector<Value> items = iterate(in);
  return Value::list(std::vector<Value>(items.rbegin(), items.rend()));
}

// The sort key Jinja uses: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value::string(text::lower(v.as_string())) : v;
}

// Python's sorted(): stable, ascending unless reverse.
void stable_sort(std::vector<Value>& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? compare(keys[y], keys[x], "<") < 0 : compare(keys[x], keys[y], "<") < 0;
  });
  std::vector<Value> sorted;
  for (const size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

Value filter_sort(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"reverse", "case_sensitive", "attribute"}, "sort");
  std::vector<Value> items = iterate(in);
  std::vector<Value> keys;
  const bool case_sensitive = truthy(a.get(1, Value::boolean(false)));
  for (const Value& item : items) {
    keys.push_back(sort_key(a.given(2) ? get_attribute(item, to_str(a[2])) : item, case_sensitive));
  }
  stable_sort(items, keys, truthy(a.get(0, Value::boolean(false))));
  return Value::list(std::move(items));
}

Value filter_dictsort(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {"case_sensitive", "by", "reverse"}, "dictsort");
  if (!in.is_dict()) throw EvalError("dictsort needs a mapping, not " + type_name(in));
  const std::string by = to_str(a.get(1, Value::string("key")));
  if (by != "key" && by != "value")
    throw EvalError("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  std::vector<Value> keys;
  for (const auto& [k, v] : in.as_dict().items) {
    items.push_back(Value::list({k, v}, true));
    keys.push_back(sort_key(by == "key" ? k : v, truthy(a.get(0, Value::boolean(false)))));
  }
  stable_sort(items, keys, truthy(a.get(2, Value::boolean(false))));
  return Value::list(std::move(items));
}

Value filter_abs(const Value& in, const CallArgs& args) {
  BoundArgs a(args, {}, "abs");
  if (in.is_integral()) return in.as_int() < 0 ? unary_op("-", in) : Value::integer(in.as_int());
  if (in.is_float()) return Value::number(std::fabs(in.as_double()));
  throw EvalError("bad operand type for abs(): '" + type_name(in) + "'");
}

template <typename Fn>
struct Named {
  std::string_view name;
  Fn fn;
};

constexpr Named<FilterFn> kFilters[] = {
    {"abs", filter_abs},
    {"capitalize", filter_capitalize},
    {"count", filter_length},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_dictsort},
    {"first", filter_first},
    {"float", filter_float},
    {"int", filter_int},
    {"items", filter_items},
    {"join", filter_join},
    {"last", filter_last},
    {"length", filter_length},
    {"list", filter_list},
    {"lower", filter_lower},
    {"map", filter_map},
    {"reject", filter_reject},
    {"rejectattr", filter_rejectattr},
    {"replace", filter_replace},
    {"reverse", filter_reverse},
    {"safe", filter_safe},
    {"select", filter_select},
    {"selectattr", filter_selectattr},
    {"sort", filter_sort},
    {"string", filter_string},
    {"title", filter_title},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"upper", filter_upper},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace tpllama::jinja
