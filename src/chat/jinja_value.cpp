// Values of the Jinja subset and their Python behaviour: str(), repr(), truth, ==, ordering, JSON.
#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja_limits.h"
#include "chat/jinja_text.h"
#include "core/utf8.h"

namespace tpllama::jinja {

namespace {

// A container's depth and namespace flag, from one of its items.
void include(int& depth, bool& holds_namespace, const Value& item) {
  switch (item.kind()) {
    case Value::Kind::kList:
      depth = std::max(depth, item.as_list().depth + 1);
      holds_namespace = holds_namespace || item.as_list().holds_namespace;
      break;
    case Value::Kind::kDict:
      depth = std::max(depth, item.as_dict().depth + 1);
      holds_namespace = holds_namespace || item.as_dict().holds_namespace;
      break;
    case Value::Kind::kNamespace: {
      // Its attributes hold no namespace, so this looks one level down only. They may change
      // later; a namespace's contents are at most kMaxValueDepth deep whatever holds it.
      int inner = 1;
      bool unused = false;
      for (const auto& [k, v] : item.as_namespace().attributes.items) include(inner, unused, v);
      depth = std::max(depth, inner + 1);
      holds_namespace = true;
      break;
    }
    default:
      break;
  }
}

// Deeper values would take the stack when they are printed, compared or freed.
void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw EvalError("lists and dicts nested more than " + std::to_string(kMaxValueDepth) + " deep");
}

}  // namespace

Value Value::string(std::string s) {
  charge_bytes(s.size() + sizeof(std::string));
  return Value(
      std::shared_ptr<const std::string>(std::make_shared<const std::string>(std::move(s))));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<ListObj>();
  for (const Value& item : items) include(l->depth, l->holds_namespace, item);
  check_depth(l->depth);
  charge_bytes(items.size() * sizeof(Value));
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::shared_ptr<const ListObj>(std::move(l)));
}

Value Value::dict(DictObj d) {
  d.depth = 1;
  d.holds_namespace = false;
  for (const auto& [k, v] : d.items) {
    include(d.depth, d.holds_namespace, k);
    include(d.depth, d.holds_namespace, v);
  }
  check_depth(d.depth);
  charge_bytes(d.items.size() * 2 * sizeof(Value));
  return Value(std::shared_ptr<const DictObj>(std::make_shared<DictObj>(std::move(d))));
}

void check_namespace_attribute(const std::string& name, const Value& value) {
  int depth = 0;
  bool holds_namespace = false;
  include(depth, holds_namespace, value);
  if (holds_namespace)
    throw EvalError("namespace attribute '" + name +
                    "' cannot hold a namespace (nested namespaces are not supported)");
  check_depth(depth);
}

Value Value::callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  return Value(std::shared_ptr<const Callable>(
      std::make_shared<Callable>(Callable{std::move(name), std::move(fn)})));
}

std::int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return as_bool() ? 1 : 0;
  if (kind() != Kind::kInt)
    throw EvalError("'" + type_name(*this) + "' object cannot be interpreted as an integer");
  return std::get<std::int64_t>(data_);
}

double Value::as_double() const {
  return is_float() ? std::get<double>(data_) : static_cast<double>(as_int());
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList:
      return list_ptr() == other.list_ptr();
    case Kind::kDict:
      return &as_dict() == &other.as_dict();
    case Kind::kNamespace:
      return &as_namespace() == &other.as_namespace();
    case Kind::kCallable:
      return &as_callable() == &other.as_callable();
    case Kind::kLoop:
      return &as_loop() == &other.as_loop();
    default:
      return equals(*this, other);
  }
}

const Value* DictObj::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictObj::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictObj::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kLoop:
      return "LoopContext";
  }
  return "object";
}

std::string object_description(const Value& v) {
  return v.is_none() ? "None" : type_name(v) + " object";
}

namespace {

std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i ? ", " : "") + to_repr(items[i]);
    check_bytes(out.size());  // items share their strings: the text can be far larger than they are
  }
  return out;
}

std::string dict_repr(const DictObj& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    out += (i ? ", " : "") + to_repr(d.items[i].first) + ": " + to_repr(d.items[i].second);
    check_bytes(out.size());
  }
  return out + "}";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return text::float_repr(v.as_double());
    case Value::Kind::kString:
      return v.as_string();
    case Value::Kind::kList: {
      const ListObj& l = v.as_list();
      if (!l.is_tuple) return "[" + join_repr(l.items) + "]";
      return "(" + join_repr(l.items) + (l.items.size() == 1 ? ",)" : ")");
    }
    case Value::Kind::kDict:
      return dict_repr(v.as_dict());
    case Value::Kind::kNamespace:
      return "<Namespace " + dict_repr(v.as_namespace().attributes) + ">";
    case Value::Kind::kCallable:
      return "<function " + v.as_callable().name + ">";
    case Value::Kind::kLoop: {
      const LoopObj& l = v.as_loop();
      return "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.length()) +
             ">";
    }
  }
  return "";
}

std::string to_repr(const Value& v) {
  if (v.is_string()) return text::repr(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_double() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().items.empty();
    default:
      return true;
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListObj& x = a.as_list();
      const ListObj& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const DictObj& x = a.as_dict();
      const DictObj& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) throw EvalError(a.undefined_hint());
  if (b.is_undefined()) throw EvalError(b.undefined_hint());
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral())
      return (a.as_int() > b.as_int()) - (a.as_int() < b.as_int());
    return (a.as_double() > b.as_double()) - (a.as_double() < b.as_double());
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string());
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return (x.size() > y.size()) - (x.size() < y.size());
  }
  throw EvalError("'" + std::string(op) + "' not supported between instances of '" + type_name(a) +
                  "' and '" + type_name(b) + "'");
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      // Python ints are unbounded; past int64 the nearest double is the best this model holds.
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictObj d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(Value::string(k), from_json(e));
      return Value::dict(std::move(d));
    }
    default:
      throw EvalError("JSON value of type " + std::string(j.type_name()) + " has no Jinja value");
  }
}

namespace {

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = utf8::decode(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c > 0xffff) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (v >> 10)),
                      static_cast<unsigned>(0xdc00 + (v & 0x3ff)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out.append(s, start, i - start);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return text::float_repr(d);
}

// A dict key as json.dumps converts it: str as is, numbers, booleans and None as their JSON text.
std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.as_string();
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    case Value::Kind::kFloat:
      return json_float(k.as_double());
    default:
      throw EvalError("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(const Value& v, const JsonStyle& style, int level, std::string& out);

// Opens a container's next item: the separator after the first, then a newline and indent.
void open_item(const JsonStyle& style, int level, bool first, std::string& out) {
  check_bytes(
      out.size());  // shared strings and indentation: the text can be far larger than the value
  if (!first) out += style.item_separator;
  if (!style.indent) return;
  out += '\n';
  for (int i = 0; i < level; ++i) out += *style.indent;
}

void close_container(const JsonStyle& style, int level, char close, std::string& out) {
  if (style.indent) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *style.indent;
  }
  out += close;
}

void dump_dict(const DictObj& d, const JsonStyle& style, int level, std::string& out) {
  if (d.items.empty()) {
    out += "{}";
    return;
  }
  std::vector<const std::pair<Value, Value>*> order;
  for (const auto& item : d.items) order.push_back(&item);
  if (style.sort_keys) {
    std::stable_sort(order.begin(), order.end(), [](const auto* x, const auto* y) {
      return compare(x->first, y->first, "<") < 0;
    });
  }
  out += '{';
  for (size_t i = 0; i < order.size(); ++i) {
    open_item(style, level + 1, i == 0, out);
    append_json_string(out, json_key(order[i]->first), style.ensure_ascii);
    out += style.key_separator;
    dump(order[i]->second, style, level + 1, out);
  }
  close_container(style, level, '}', out);
}

void dump(const Value& v, const JsonStyle& style, int level, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += json_float(v.as_double());
      return;
    case Value::Kind::kString:
      append_json_string(out, v.as_string(), style.ensure_ascii);
      return;
    case Value::Kind::kDict:
      dump_dict(v.as_dict(), style, level, out);
      return;
    case Value::Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        open_item(style, level + 1, i == 0, out);
        dump(items[i], style, level + 1, out);
      }
      close_container(style, level, ']', out);
      return;
    }
    default:
      throw EvalError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(v, style, 0, out);
  return out;
}

}  // namespace tpllama::jinja
