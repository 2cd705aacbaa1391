// Schemas into shapes: keyword by keyword into branches, intersected, united and filtered.
#include "grammar/schema_shape.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace tpllama::grammar {
namespace {

using json = SchemaJson;

const std::vector<std::string> kKeywords = {"type",
                                            "enum",
                                            "const",
                                            "allOf",
                                            "anyOf",
                                            "oneOf",
                                            "$ref",
                                            "$defs",
                                            "definitions",
                                            "minimum",
                                            "maximum",
                                            "exclusiveMinimum",
                                            "exclusiveMaximum",
                                            "minLength",
                                            "maxLength",
                                            "pattern",
                                            "format",
                                            "items",
                                            "prefixItems",
                                            "minItems",
                                            "maxItems",
                                            "uniqueItems",
                                            "properties",
                                            "required",
                                            "additionalProperties",
                                            "patternProperties",
                                            "propertyNames",
                                            "minProperties",
                                            "maxProperties"};

// Annotations: they describe, they do not validate.
const std::vector<std::string> kAnnotations = {"title",    "description", "examples", "default",
                                               "$schema",  "$id",         "$comment", "deprecated",
                                               "readOnly", "writeOnly"};

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  fail("JSON schema at ", where, ": ", what);
}

bool listed(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

bool numeric(Kind k) {
  return k == Kind::kInteger || k == Kind::kNumber;
}

Kind kind_of(const json& v) {
  if (v.is_null()) return Kind::kNull;
  if (v.is_boolean()) return Kind::kBoolean;
  if (v.is_number()) return Kind::kNumber;
  if (v.is_string()) return Kind::kString;
  if (v.is_array()) return Kind::kArray;
  return Kind::kObject;
}

// The value a validator compares: an integer as written, a double exactly.
std::optional<Decimal> decimal_of(const json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d)) return std::nullopt;
    return Decimal::exact(d);
  }
  return Decimal::parse(v.dump(), 400);
}

bool integral(const json& v) {
  if (v.is_number_integer()) return true;  // unsigned too
  if (!v.is_number_float()) return false;
  const std::optional<Decimal> d = decimal_of(v);
  return d && d->whole();
}

// JSON Schema's equality: numbers by value (1 is 1.0), objects whatever their members' order.
bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const std::optional<Decimal> x = decimal_of(a), y = decimal_of(b);
    return x && y && compare(*x, *y) == 0;
  }
  if (kind_of(a) != kind_of(b)) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_value(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto other = b.find(it.key());
      if (other == b.end() || !same_value(it.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

RangeBound tighter_low(const RangeBound& a, const RangeBound& b) {
  if (!a.value) return b;
  if (!b.value) return a;
  const int c = compare(*a.value, *b.value);
  if (c != 0) return c > 0 ? a : b;
  return a.exclusive ? a : b;
}

RangeBound tighter_high(const RangeBound& a, const RangeBound& b) {
  if (!a.value) return b;
  if (!b.value) return a;
  const int c = compare(*a.value, *b.value);
  if (c != 0) return c < 0 ? a : b;
  return a.exclusive ? a : b;
}

// Whether [lo, hi] holds no value (no integer, where `integer`; no non-integer, where
// `not_integer`).
bool range_empty(const RangeBound& lo, const RangeBound& hi, bool integer, bool not_integer) {
  if (integer) return !integer_range_regex(lo, hi, {1, 0, 0}).has_value();
  if (!lo.value || !hi.value) return false;
  const int c = compare(*lo.value, *hi.value);
  if (c > 0 || (c == 0 && (lo.exclusive || hi.exclusive))) return true;
  return c == 0 && not_integer && lo.value->whole();
}

// Whether every value of [lo, hi] lies in [outer_lo, outer_hi].
bool range_within(const RangeBound& lo, const RangeBound& hi, const RangeBound& outer_lo,
                  const RangeBound& outer_hi) {
  if (outer_lo.value) {
    if (!lo.value) return false;
    const int c = compare(*lo.value, *outer_lo.value);
    if (c < 0 || (c == 0 && outer_lo.exclusive && !lo.exclusive)) return false;
  }
  if (outer_hi.value) {
    if (!hi.value) return false;
    const int c = compare(*hi.value, *outer_hi.value);
    if (c > 0 || (c == 0 && outer_hi.exclusive && !hi.exclusive)) return false;
  }
  return true;
}

bool counts_disjoint(int min_a, int max_a, int min_b, int max_b) {
  return (max_a >= 0 && min_b > max_a) || (max_b >= 0 && min_a > max_b);
}

int tighter_max(int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

Shape universe() {
  Shape s;
  for (Kind k :
       {Kind::kNull, Kind::kBoolean, Kind::kNumber, Kind::kString, Kind::kArray, Kind::kObject}) {
    Branch b;
    b.kind = k;
    s.push_back(std::move(b));
  }
  return s;
}

// A branch that constrains nothing of its kind (every value of the kind).
bool unconstrained(const Branch& b) {
  if (b.values) return false;
  switch (b.kind) {
    case Kind::kNull:
    case Kind::kBoolean:
      return true;
    case Kind::kInteger:
    case Kind::kNumber:
      return !b.minimum.value && !b.maximum.value && !b.not_integer;
    case Kind::kString:
      return b.string.min_length == 0 && b.string.max_length < 0 && b.string.patterns.empty() &&
             b.string.formats.empty();
    case Kind::kArray:
      return b.array.prefix.empty() && b.array.rest == Rest::kSchema &&
             b.array.items.parts.empty() && b.array.min_items == 0 && b.array.max_items < 0;
    case Kind::kObject:
      return b.object.properties.empty() && b.object.open.empty() && !b.object.property_names &&
             b.object.min_properties == 0 && b.object.max_properties < 0;
  }
  return false;
}

// Drops the branches another of their kind holds whole (an unconstrained one), keeping whether
// any was asked for.
void simplify(Shape& s) {
  Shape out;
  for (const Branch& b : s) {
    bool held = false;
    for (Branch& o : out)
      if (unconstrained(o) && (o.kind == b.kind || (o.kind == Kind::kNumber && numeric(b.kind)))) {
        o.named = o.named || b.named;
        held = true;
        break;
      }
    if (held) continue;
    if (unconstrained(b)) {  // it holds those already out
      bool named = b.named;
      auto covered = [&](const Branch& o) {
        const bool in = o.kind == b.kind || (b.kind == Kind::kNumber && numeric(o.kind));
        if (in) named = named || o.named;
        return in;
      };
      out.erase(std::remove_if(out.begin(), out.end(), covered), out.end());
      out.push_back(b);
      out.back().named = named;
      continue;
    }
    out.push_back(b);
  }
  s = std::move(out);
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBoolean:
      return "boolean";
    case Kind::kInteger:
      return "integer";
    case Kind::kNumber:
      return "number";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return "array";
    case Kind::kObject:
      return "object";
  }
  return "?";
}

void Conjunction::add(const Conjunction& more) {
  for (const auto& part : more.parts) {
    const bool known = std::any_of(parts.begin(), parts.end(),
                                   [&](const auto& p) { return p.first == part.first; });
    if (!known) parts.push_back(part);
  }
}

std::string Conjunction::key() const {
  std::vector<const SchemaJson*> schemas;
  for (const auto& part : parts) schemas.push_back(part.first);
  std::sort(schemas.begin(), schemas.end());
  std::string key;
  char buf[24];
  for (const SchemaJson* s : schemas) {
    std::snprintf(buf, sizeof buf, "%p,", static_cast<const void*>(s));
    key += buf;
  }
  return key;
}

const std::vector<std::string>& supported_schema_keywords() {
  return kKeywords;
}
const std::vector<std::string>& schema_annotations() {
  return kAnnotations;
}
// ---- Reading -----------------------------------------------------------------------------------

namespace {

// A bound as a validator compares it. A bound written with a fraction or an exponent is a double
// (0.1 is a little above 0.1): taken as its shortest decimal where that has at most 15
// significant digits below 1e15 (the numbers written, of at most 15, then compare with it as
// doubles do), else as the double's exact value. An integer is exact at any size, but past 2^63
// the request's JSON reader holds it as a double too, rounded: refused.
RangeBound schema_bound(const json& v, const std::string& where, const std::string& key,
                        bool exclusive) {
  if (v.is_boolean())
    refuse(where, "'" + key + "' must be a number (draft 2020-12's form), got " + v.dump());
  if (!v.is_number()) refuse(where, "'" + key + "' must be a number, got " + v.dump());
  std::optional<Decimal> d = decimal_of(v);
  if (!d) refuse(where, "'" + key + "' is out of range: " + v.dump());
  if (v.is_number_float()) {
    if (std::fabs(v.get<double>()) >= 0x1p63)
      refuse(where, "'" + key + "' is " + v.dump() +
                        ": a bound of 2^63 or more is read as a double, rounded (not supported)");
    const std::optional<Decimal> shortest = Decimal::parse(v.dump());
    std::string digits = shortest ? shortest->integer + shortest->fraction : "";
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    if (shortest && digits.size() <= 15 &&
        (shortest->integer == "0" || shortest->integer.size() <= 15))
      d = shortest;
  }
  return {d, exclusive};
}

int read_count(const json& schema, const char* key, const std::string& where, int limit,
               int fallback) {
  auto it = schema.find(key);
  if (it == schema.end()) return fallback;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > static_cast<uint64_t>(limit))
    refuse(where, std::string("'") + key + "' must be an integer from 0 to " +
                      std::to_string(limit) + ", got " + it->dump());
  return static_cast<int>(it->get<uint64_t>());
}

// A sub-schema's place.
Conjunction place(const json& schema, const std::string& where) {
  Conjunction c;
  c.parts.emplace_back(&schema, where);
  return c;
}

void check_pattern(const json& p, const std::string& where, const std::string& key) {
  if (!p.is_string()) refuse(where, "'" + key + "' must be a string, got " + p.dump());
  RegexOptions options;
  options.json_string = true;
  try {
    compile_regex(searched(p.get<std::string>(), ".*"), options);
  } catch (const Error& e) {
    refuse(where, "'" + key + "' " + p.dump() + ": " + e.what());
  }
}

// The keywords of one kind, read into a branch; whether any was there.
bool apply_number(const json& schema, const std::string& where, Branch& b) {
  bool any = false;
  const std::tuple<const char*, bool, bool> keys[] = {{"minimum", false, true},
                                                      {"exclusiveMinimum", true, true},
                                                      {"maximum", false, false},
                                                      {"exclusiveMaximum", true, false}};
  for (const auto& [key, exclusive, low] : keys) {
    auto it = schema.find(key);
    if (it == schema.end()) continue;
    any = true;
    const RangeBound bound = schema_bound(*it, where, key, exclusive);
    if (low)
      b.minimum = tighter_low(b.minimum, bound);
    else
      b.maximum = tighter_high(b.maximum, bound);
  }
  return any;
}

bool apply_string(const json& schema, const std::string& where, int limit, Branch& b) {
  b.string.min_length = read_count(schema, "minLength", where, limit, 0);
  b.string.max_length = read_count(schema, "maxLength", where, limit, -1);
  bool any = schema.contains("minLength") || schema.contains("maxLength");
  if (auto p = schema.find("pattern"); p != schema.end()) {
    check_pattern(*p, where, "pattern");
    b.string.patterns.push_back(*p);
    any = true;
  }
  if (auto f = schema.find("format"); f != schema.end()) {
    const bool known = f->is_string() &&
                       std::any_of(schema_formats().begin(), schema_formats().end(),
                                   [&](const auto& k) { return k.first == f->get<std::string>(); });
    if (!known) refuse(where, "the format " + f->dump() + " is not supported");
    b.string.formats.push_back(*f);
    any = true;
  }
  return any;
}

bool apply_array(const json& schema, const std::string& where, int limit, Branch& b) {
  ArrayRules& a = b.array;
  a.min_items = read_count(schema, "minItems", where, limit, 0);
  a.max_items = read_count(schema, "maxItems", where, limit, -1);
  bool any = schema.contains("minItems") || schema.contains("maxItems");
  if (auto p = schema.find("prefixItems"); p != schema.end()) {
    if (!p->is_array()) refuse(where, "'prefixItems' must be a list of schemas");
    if (p->size() > static_cast<size_t>(limit))
      refuse(where, "'prefixItems' of more than " + std::to_string(limit) + " schemas");
    for (size_t i = 0; i < p->size(); ++i)
      a.prefix.push_back(place((*p)[i], where + "/prefixItems/" + std::to_string(i)));
    any = true;
  }
  if (auto items = schema.find("items"); items != schema.end()) {
    if (items->is_boolean()) {
      a.rest = items->get<bool>() ? Rest::kSchema : Rest::kNone;
    } else if (items->is_object()) {
      a.rest = Rest::kSchema;
      a.items = place(*items, where + "/items");
    } else {
      refuse(where, "'items' must be a schema, got " + items->dump());
    }
    any = true;
  } else if (!a.prefix.empty()) {
    a.rest = Rest::kUnwritten;
  }
  if (auto u = schema.find("uniqueItems"); u != schema.end()) {
    if (!u->is_boolean()) refuse(where, "'uniqueItems' must be a boolean");
    if (u->get<bool>()) refuse(where, "'uniqueItems': true is not supported");
    any = true;
  }
  return any;
}

bool apply_object(const json& schema, const std::string& where, int limit, Branch& b) {
  ObjectRules& o = b.object;
  o.min_properties = read_count(schema, "minProperties", where, limit, 0);
  o.max_properties = read_count(schema, "maxProperties", where, limit, -1);
  bool any = schema.contains("minProperties") || schema.contains("maxProperties");
  auto props = schema.find("properties");
  if (props != schema.end()) {
    if (!props->is_object()) refuse(where, "'properties' must be an object");
    for (auto it = props->begin(); it != props->end(); ++it)
      o.properties.emplace_back(it.key(), place(it.value(), where + "/properties/" + it.key()));
    any = true;
  }
  if (auto r = schema.find("required"); r != schema.end()) {
    if (!r->is_array()) refuse(where, "'required' must be a list of names");
    for (const json& name : *r) {
      if (!name.is_string()) refuse(where, "'required' lists " + name.dump() + ", not a name");
      if (!listed(o.required, name)) o.required.push_back(name);
    }
    any = true;
  }
  auto patterns = schema.find("patternProperties");
  auto extra = schema.find("additionalProperties");
  if (props != schema.end() || patterns != schema.end() || extra != schema.end()) {
    OpenRule rule;
    if (patterns != schema.end()) {
      if (!patterns->is_object()) refuse(where, "'patternProperties' must be an object");
      for (auto it = patterns->begin(); it != patterns->end(); ++it) {
        check_pattern(json(it.key()), where, "patternProperties");
        rule.patterns.emplace_back(it.key(),
                                   place(it.value(), where + "/patternProperties/" + it.key()));
      }
    }
    if (extra == schema.end()) {
      rule.rest = Rest::kUnwritten;
    } else if (extra->is_boolean()) {
      rule.rest = extra->get<bool>() ? Rest::kSchema : Rest::kNone;
    } else if (extra->is_object()) {
      rule.rest = Rest::kSchema;
      rule.additional = place(*extra, where + "/additionalProperties");
    } else {
      refuse(where, "'additionalProperties' must be a schema, got " + extra->dump());
    }
    o.open.push_back(std::move(rule));
    any = true;
  }
  if (auto names = schema.find("propertyNames"); names != schema.end()) {
    if (!names->is_object() && !names->is_boolean())
      refuse(where, "'propertyNames' must be a schema");
    o.property_names = place(*names, where + "/propertyNames");
    any = true;
  }
  return any;
}

}  // namespace

Shape ShapeReader::typed(const json& schema, const std::string& where, int depth) {
  std::vector<Kind> kinds;
  const auto t = schema.find("type");
  if (t != schema.end()) {
    std::vector<std::string> names;
    if (t->is_string()) {
      names.push_back(*t);
    } else if (t->is_array() && !t->empty()) {
      for (const json& one : *t) {
        if (!one.is_string()) refuse(where, "'type' lists a non-string " + one.dump());
        names.push_back(one);
      }
    } else {
      refuse(where, "'type' must be a string or a list of strings");
    }
    for (const std::string& name : names) {
      bool found = false;
      for (Kind k : {Kind::kNull, Kind::kBoolean, Kind::kInteger, Kind::kNumber, Kind::kString,
                     Kind::kArray, Kind::kObject})
        if (name == kind_name(k)) {
          if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
          found = true;
        }
      if (!found) refuse(where, "unknown type '" + name + "'");
    }
  } else {
    kinds = {Kind::kNull,   Kind::kBoolean, Kind::kNumber,
             Kind::kString, Kind::kArray,   Kind::kObject};
  }
  // Each kind's keywords are read whatever the type (a keyword of the wrong form is refused even
  // where it cannot apply).
  Branch number, string, array, object;
  const bool has_number = apply_number(schema, where, number);
  const bool has_string = apply_string(schema, where, limits_.max_items, string);
  const bool has_array = apply_array(schema, where, limits_.max_items, array);
  const bool has_object = apply_object(schema, where, limits_.max_items, object);
  // A listed property whose name a pattern of patternProperties matches takes both schemas.
  if (schema.contains("patternProperties"))
    for (auto& [name, schemas] : object.object.properties)
      for (const auto& [pattern, more] : object.object.open.back().patterns)
        if (pattern_found(pattern, name, Formats::kAsserted)) schemas.add(more);
  Shape out;
  for (Kind k : kinds) {
    Branch b;
    bool asked = false;
    switch (k) {
      case Kind::kInteger:
      case Kind::kNumber:
        b = number;
        asked = has_number;
        break;
      case Kind::kString:
        b = string;
        asked = has_string;
        break;
      case Kind::kArray:
        b = array;
        asked = has_array;
        break;
      case Kind::kObject:
        b = object;
        asked = has_object;
        break;
      default:
        break;
    }
    b.kind = k;
    b.named = t != schema.end() || asked;
    // A branch no value fills is left out (merging with everything keeps the checks in one place).
    Branch any;
    any.kind = k;
    if (std::optional<Branch> m = merge(b, any, depth)) out.push_back(std::move(*m));
  }
  return out;
}

const Shape& ShapeReader::read(const Conjunction& c, int depth) {
  const std::string key = c.key();
  if (auto it = shapes_.find(key); it != shapes_.end()) return it->second;
  if (depth > limits_.max_depth)
    refuse(c.where(), "nested deeper than " + std::to_string(limits_.max_depth));
  if (shapes_.size() >= limits_.max_places)
    refuse(c.where(), "more than " + std::to_string(limits_.max_places) + " places to read");
  reading_.insert(key);
  Shape s = universe();
  try {
    for (const auto& [schema, where] : c.parts) {
      std::vector<std::string> refs;
      s = intersect(s, read_one(*schema, where, depth, refs), where, depth);
      if (s.empty()) break;
    }
  } catch (...) {
    reading_.erase(key);
    throw;
  }
  reading_.erase(key);
  return shapes_.emplace(key, std::move(s)).first->second;
}

bool ShapeReader::maybe_inhabited(const Conjunction& c, int depth) {
  const std::string key = c.key();
  if (auto it = shapes_.find(key); it != shapes_.end()) return !it->second.empty();
  if (reading_.count(key)) return true;  // a place within itself: taken as it will be
  return !read(c, depth).empty();
}

Shape ShapeReader::read_one(const json& schema, const std::string& where, int depth,
                            std::vector<std::string>& refs) {
  if (depth > limits_.max_depth)
    refuse(where, "nested deeper than " + std::to_string(limits_.max_depth));
  if (schema.is_boolean()) return schema.get<bool>() ? universe() : Shape{};
  if (!schema.is_object()) refuse(where, "a schema must be an object or a boolean");
  for (auto it = schema.begin(); it != schema.end(); ++it)
    if (!listed(kKeywords, it.key()) && !listed(kAnnotations, it.key()))
      refuse(where, "the keyword '" + it.key() + "' is not supported");
  for (const char* defs : {"$defs", "definitions"})
    if (auto d = schema.find(defs); d != schema.end() && !d->is_object())
      refuse(where, std::string("'") + defs + "' must be an object of schemas");

  Shape s = typed(schema, where, depth);
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string()) refuse(where, "'$ref' must be a string");
    const std::string path = *ref;
    if (listed(refs, path))
      refuse(where, "'$ref' " + ref->dump() + " refers back to itself with no value between");
    const json* target = nullptr;
    if (path == "#") {
      target = &root_;
    } else if (path.rfind("#/", 0) == 0) {
      try {
        const json::json_pointer pointer(path.substr(1));
        if (root_.contains(pointer)) target = &root_.at(pointer);
      } catch (const std::exception&) {
        target = nullptr;
      }
    }
    if (target == nullptr || !(target->is_object() || target->is_boolean()))
      refuse(where, "'$ref' " + ref->dump() + " is not a local reference this schema defines");
    refs.push_back(path);
    Shape r = read_one(*target, path, depth + 1, refs);
    refs.pop_back();
    s = intersect(s, r, where, depth);
  }
  const auto list = [&](const char* key) -> const json* {
    auto it = schema.find(key);
    if (it == schema.end()) return nullptr;
    if (!it->is_array() || it->empty())
      refuse(where, std::string("'") + key + "' must be a non-empty list of schemas");
    return &*it;
  };
  if (const json* all = list("allOf"))
    for (size_t i = 0; i < all->size(); ++i)
      s = intersect(s, read_one((*all)[i], where + "/allOf/" + std::to_string(i), depth + 1, refs),
                    where, depth);
  if (const json* any = list("anyOf")) {
    Shape u;
    for (size_t i = 0; i < any->size(); ++i)
      for (Branch& b : read_one((*any)[i], where + "/anyOf/" + std::to_string(i), depth + 1, refs))
        u.push_back(std::move(b));
    simplify(u);
    s = intersect(s, u, where, depth);
  }
  if (const json* one = list("oneOf")) {
    std::vector<Shape> alternatives;
    for (size_t i = 0; i < one->size(); ++i)
      alternatives.push_back(
          intersect(s, read_one((*one)[i], where + "/oneOf/" + std::to_string(i), depth + 1, refs),
                    where, depth));
    s = exclusive_union(alternatives, where, depth);
  }
  auto e = schema.find("enum");
  auto c = schema.find("const");
  if (e != schema.end() || c != schema.end()) {
    std::vector<json> values;
    if (e != schema.end()) {
      if (!e->is_array() || e->empty() || e->size() > limits_.max_enum)
        refuse(where,
               "'enum' must be a list of 1 to " + std::to_string(limits_.max_enum) + " values");
      for (const json& v : *e)
        if (c == schema.end() || same_value(v, *c)) values.push_back(v);
    } else {
      values.push_back(*c);
    }
    // The values the schema's other keywords validate, by kind.
    Shape kept;
    for (const json& v : values) {
      if (!accepts(s, v, Formats::kAsserted, depth)) {
        if (!format_refused_ && accepts(s, v, Formats::kIgnored, depth)) format_refused_ = v;
        continue;
      }
      const Kind k = kind_of(v);
      auto it =
          std::find_if(kept.begin(), kept.end(), [&](const Branch& b) { return b.kind == k; });
      if (it == kept.end()) {
        Branch b;
        b.kind = k;
        b.named = true;
        b.values.emplace();
        kept.push_back(std::move(b));
        it = kept.end() - 1;
      }
      it->values->push_back(v);
    }
    s = std::move(kept);
  }
  return s;
}

Shape ShapeReader::intersect(const Shape& a, const Shape& b, const std::string& where, int depth) {
  Shape out;
  for (const Branch& x : a)
    for (const Branch& y : b)
      if (std::optional<Branch> m = merge(x, y, depth)) out.push_back(std::move(*m));
  simplify(out);
  if (out.size() > limits_.max_branches)
    refuse(where, "more than " + std::to_string(limits_.max_branches) +
                      " alternatives at one place (allOf of anyOfs multiplies them)");
  return out;
}

std::optional<Branch> ShapeReader::merge_values(const Branch& with, const Branch& other,
                                                int depth) {
  Branch out;
  out.kind = with.kind;
  out.named = true;
  out.values.emplace();
  for (const json& v : *with.values)
    if (accepts(other, v, Formats::kAsserted, depth)) out.values->push_back(v);
  if (out.values->empty()) return std::nullopt;
  return out;
}

std::optional<Branch> ShapeReader::merge(const Branch& a, const Branch& b, int depth) {
  if (a.values) return merge_values(a, b, depth);
  if (b.values) return merge_values(b, a, depth);
  Branch o = a;
  if (a.kind != b.kind) {
    if (!numeric(a.kind) || !numeric(b.kind)) return std::nullopt;
    o.kind = Kind::kInteger;
  }
  o.named = a.named || b.named;
  switch (o.kind) {
    case Kind::kInteger:
    case Kind::kNumber:
      o.minimum = tighter_low(a.minimum, b.minimum);
      o.maximum = tighter_high(a.maximum, b.maximum);
      o.not_integer = a.not_integer || b.not_integer;
      if (o.kind == Kind::kInteger && o.not_integer) return std::nullopt;
      if (range_empty(o.minimum, o.maximum, o.kind == Kind::kInteger, o.not_integer))
        return std::nullopt;
      break;
    case Kind::kString:
      o.string.min_length = std::max(a.string.min_length, b.string.min_length);
      o.string.max_length = tighter_max(a.string.max_length, b.string.max_length);
      for (const std::string& p : b.string.patterns)
        if (!listed(o.string.patterns, p)) o.string.patterns.push_back(p);
      for (const std::string& f : b.string.formats)
        if (!listed(o.string.formats, f)) o.string.formats.push_back(f);
      if (o.string.max_length >= 0 && o.string.min_length > o.string.max_length)
        return std::nullopt;
      if (!lengths_possible(o.string)) return std::nullopt;
      break;
    case Kind::kArray: {
      std::optional<ArrayRules> r = merge_arrays(a.array, b.array);
      if (!r) return std::nullopt;
      o.array = std::move(*r);
      break;
    }
    case Kind::kObject: {
      std::optional<ObjectRules> r = merge_objects(a.object, b.object, depth);
      if (!r) return std::nullopt;
      o.object = std::move(*r);
      break;
    }
    default:
      break;
  }
  return o;
}

namespace {

// The schemas of item i; nullopt: there may be no item i.
std::optional<Conjunction> item_at(const ArrayRules& a, size_t i) {
  if (i < a.prefix.size()) return a.prefix[i];
  if (a.rest == Rest::kNone) return std::nullopt;
  if (a.rest == Rest::kSchema) return a.items;
  return Conjunction{};
}

}  // namespace

std::optional<ArrayRules> ShapeReader::merge_arrays(const ArrayRules& a, const ArrayRules& b) {
  ArrayRules o;
  o.min_items = std::max(a.min_items, b.min_items);
  o.max_items = tighter_max(a.max_items, b.max_items);
  // Past the prefixes: none if either allows none; else the items' schemas of both, written
  // unless the only schemas are "any" beside a rest left unwritten.
  if (a.rest == Rest::kNone || b.rest == Rest::kNone) {
    o.rest = Rest::kNone;
  } else {
    for (const ArrayRules* r : {&a, &b})
      if (r->rest == Rest::kSchema) o.items.add(r->items);
    const bool unwritten = a.rest == Rest::kUnwritten || b.rest == Rest::kUnwritten;
    o.rest = unwritten && o.items.parts.empty() ? Rest::kUnwritten : Rest::kSchema;
  }
  const size_t n = std::max(a.prefix.size(), b.prefix.size());
  for (size_t i = 0; i < n; ++i) {
    std::optional<Conjunction> x = item_at(a, i), y = item_at(b, i);
    if (!x || !y) {  // no item i: the array ends before it
      o.max_items = tighter_max(o.max_items, static_cast<int>(i));
      o.rest = Rest::kNone;
      break;
    }
    x->add(*y);
    o.prefix.push_back(std::move(*x));
  }
  if (o.rest == Rest::kNone)
    o.max_items = tighter_max(o.max_items, static_cast<int>(o.prefix.size()));
  if (o.max_items >= 0 && o.min_items > o.max_items) return std::nullopt;
  return o;
}

std::optional<Conjunction> ShapeReader::open_member(const std::vector<OpenRule>& open,
                                                    const std::string& name) {
  Conjunction c;
  for (const OpenRule& rule : open) {
    bool matched = false;
    for (const auto& [pattern, schemas] : rule.patterns)
      if (pattern_found(pattern, name, Formats::kAsserted)) {
        c.add(schemas);
        matched = true;
      }
    if (matched) continue;
    if (rule.rest == Rest::kNone) return std::nullopt;
    if (rule.rest == Rest::kSchema) c.add(rule.additional);
  }
  return c;
}

std::optional<ObjectRules> ShapeReader::merge_objects(const ObjectRules& a, const ObjectRules& b,
                                                      int depth) {
  ObjectRules o;
  for (const auto& list : {a.required, b.required})
    for (const std::string& name : list)
      if (!listed(o.required, name)) o.required.push_back(name);
  const auto schemas_of = [&](const ObjectRules& r,
                              const std::string& name) -> std::optional<Conjunction> {
    for (const auto& [n, c] : r.properties)
      if (n == name) return c;
    return open_member(r.open, name);
  };
  std::vector<std::string> names;
  for (const ObjectRules* r : {&a, &b})
    for (const auto& p : r->properties)
      if (!listed(names, p.first)) names.push_back(p.first);
  for (const std::string& name : names) {
    std::optional<Conjunction> x = schemas_of(a, name), y = schemas_of(b, name);
    if (!x || !y) {
      if (listed(o.required, name)) return std::nullopt;
      continue;  // not allowed: the grammar leaves it out
    }
    x->add(*y);
    o.properties.emplace_back(name, std::move(*x));
  }
  o.open = a.open;
  o.open.insert(o.open.end(), b.open.begin(), b.open.end());
  if (a.property_names || b.property_names) {
    o.property_names.emplace();
    if (a.property_names) o.property_names->add(*a.property_names);
    if (b.property_names) o.property_names->add(*b.property_names);
  }
  o.min_properties = std::max(a.min_properties, b.min_properties);
  o.max_properties = tighter_max(a.max_properties, b.max_properties);
  if (!settle_object(o, depth)) return std::nullopt;
  return o;
}

bool ShapeReader::settle_object(ObjectRules& o, int depth) {
  for (const std::string& name : o.required) {
    const bool known = std::any_of(o.properties.begin(), o.properties.end(),
                                   [&](const auto& p) { return p.first == name; });
    if (known) continue;
    std::optional<Conjunction> c = open_member(o.open, name);
    if (!c) return false;
    o.properties.emplace_back(name, std::move(*c));
  }
  for (const auto& [name, schemas] : o.properties)  // a required member no value fills
    if (listed(o.required, name) && !maybe_inhabited(schemas, depth + 1)) return false;
  if (o.property_names) {
    const Shape& names = read(*o.property_names, depth + 1);
    std::vector<std::pair<std::string, Conjunction>> kept;
    for (auto& p : o.properties) {
      if (accepts(names, json(p.first), Formats::kAsserted, depth + 1)) {
        kept.push_back(std::move(p));
      } else if (listed(o.required, p.first)) {
        return false;
      }
    }
    o.properties = std::move(kept);
  }
  if (o.max_properties >= 0 && (o.min_properties > o.max_properties ||
                                o.required.size() > static_cast<size_t>(o.max_properties)))
    return false;
  // No member but the named ones: too few of them for minProperties.
  const bool closed = std::any_of(o.open.begin(), o.open.end(), [](const OpenRule& r) {
    return r.rest == Rest::kNone && r.patterns.empty();
  });
  return !(closed && o.properties.size() < static_cast<size_t>(o.min_properties));
}

// ---- Unions that exclude ----------------------------------------------------------------------

Shape ShapeReader::exclusive_union(const std::vector<Shape>& alternatives, const std::string& where,
                                   int depth) {
  Shape out;
  for (size_t i = 0; i < alternatives.size(); ++i)
    for (const Branch& x : alternatives[i]) {
      Branch keep = written_closed(x, depth);
      bool dropped = false;
      for (size_t j = 0; j < alternatives.size() && !dropped; ++j) {
        if (j == i) continue;
        for (const Branch& y : alternatives[j]) {
          if (keep.values) {  // the values the other branch does not match, exactly
            std::vector<json> left;
            for (const json& v : *keep.values)
              if (!accepts(y, v, Formats::kIgnored, depth)) left.push_back(v);
            keep.values = std::move(left);
            if (keep.values->empty()) dropped = true;
            if (dropped) break;
            continue;
          }
          if (disjoint(keep, y, depth)) continue;
          // A number beside an integer: the number's branch keeps the values with a fraction,
          // the integer's goes where the number's takes all of its values.
          if (numeric(keep.kind) && numeric(y.kind) && !y.values) {
            if (keep.kind == Kind::kNumber && y.kind == Kind::kInteger &&
                range_within(keep.minimum, keep.maximum, y.minimum, y.maximum)) {
              keep.not_integer = true;
              if (range_empty(keep.minimum, keep.maximum, false, true)) dropped = true;
              if (dropped) break;
              continue;
            }
            if (keep.kind == Kind::kInteger && y.kind == Kind::kNumber && !y.not_integer &&
                range_within(keep.minimum, keep.maximum, y.minimum, y.maximum)) {
              dropped = true;
              break;
            }
          }
          refuse(where, "'oneOf' alternatives " + std::to_string(i) + " and " + std::to_string(j) +
                            " may both match a " + kind_name(keep.kind) +
                            " (only alternatives shown to exclude each other are supported: "
                            "distinct types, values, ranges, lengths or required properties)");
        }
      }
      if (!dropped) out.push_back(std::move(keep));
    }
  return out;
}

// The branch as the grammar writes it: no member or item past those named where JSON Schema
// allows them but the strict grammar leaves them out (so {"required": ["a"]} and
// {"required": ["b"]} exclude each other as written). The branch itself where that empties it.
Branch ShapeReader::written_closed(const Branch& b, int depth) {
  Branch closed = b;
  if (b.kind == Kind::kObject && !b.values) {
    for (OpenRule& rule : closed.object.open)
      if (rule.rest == Rest::kUnwritten) rule.rest = Rest::kNone;
    if (!settle_object(closed.object, depth)) return b;
  } else if (b.kind == Kind::kArray && !b.values && b.array.rest == Rest::kUnwritten) {
    closed.array.rest = Rest::kNone;
    closed.array.max_items =
        tighter_max(closed.array.max_items, static_cast<int>(closed.array.prefix.size()));
    if (closed.array.min_items > closed.array.max_items) return b;
  }
  return closed;
}

bool ShapeReader::disjoint(const Shape& a, const Shape& b, int depth) {
  for (const Branch& x : a)
    for (const Branch& y : b)
      if (!disjoint(x, y, depth)) return false;
  return true;
}

bool ShapeReader::disjoint(const Branch& a, const Branch& b, int depth) {
  if (depth > limits_.max_depth) return false;
  if (a.kind != b.kind && !(numeric(a.kind) && numeric(b.kind))) return true;
  if (a.values || b.values) {
    const Branch& with = a.values ? a : b;
    const Branch& other = a.values ? b : a;
    for (const json& v : *with.values)
      if (accepts(other, v, Formats::kIgnored, depth)) return false;
    return true;
  }
  switch (a.kind) {
    case Kind::kInteger:
    case Kind::kNumber: {
      const bool integer = a.kind == Kind::kInteger || b.kind == Kind::kInteger;
      if (integer && (a.not_integer || b.not_integer)) return true;
      return range_empty(tighter_low(a.minimum, b.minimum), tighter_high(a.maximum, b.maximum),
                         integer, a.not_integer || b.not_integer);
    }
    case Kind::kString:
      return counts_disjoint(a.string.min_length, a.string.max_length, b.string.min_length,
                             b.string.max_length);
    case Kind::kArray: {
      if (counts_disjoint(a.array.min_items, a.array.max_items, b.array.min_items,
                          b.array.max_items))
        return true;
      const int both = std::min(a.array.min_items, b.array.min_items);
      for (int i = 0; i < both; ++i) {
        std::optional<Conjunction> x = item_at(a.array, static_cast<size_t>(i)),
                                   y = item_at(b.array, static_cast<size_t>(i));
        if (!x || !y) return true;
        if (disjoint(read(*x, depth + 1), read(*y, depth + 1), depth + 1)) return true;
      }
      return false;
    }
    case Kind::kObject: {
      const ObjectRules &x = a.object, &y = b.object;
      if (counts_disjoint(x.min_properties, x.max_properties, y.min_properties, y.max_properties))
        return true;
      const auto schemas_of = [&](const ObjectRules& r,
                                  const std::string& name) -> std::optional<Conjunction> {
        for (const auto& [n, c] : r.properties)
          if (n == name) return c;
        return open_member(r.open, name);
      };
      for (const auto& [first, second] : {std::pair{&x, &y}, std::pair{&y, &x}})
        for (const std::string& name : first->required) {
          std::optional<Conjunction> other = schemas_of(*second, name);
          if (!other) return true;  // the other does not allow it
          if (!listed(second->required, name)) continue;
          std::optional<Conjunction> mine = schemas_of(*first, name);
          if (mine && disjoint(read(*mine, depth + 1), read(*other, depth + 1), depth + 1))
            return true;
        }
      return false;
    }
    default:
      return false;
  }
}

// ---- Validation -------------------------------------------------------------------------------

bool ShapeReader::lengths_possible(const StringRules& r) {
  if (r.min_length == 0 && r.max_length < 0) return true;
  std::vector<std::string> regexes;
  for (const std::string& p : r.patterns) regexes.push_back(searched(p, "(?:.|\\n)*"));
  for (const std::string& f : r.formats)
    for (const auto& [name, regex] : schema_formats())
      if (name == f) regexes.push_back(regex);
  for (const std::string& regex : regexes) {
    const std::optional<std::pair<int, int>> span = char_range(compiled(regex));
    if (span && ((span->second >= 0 && span->second < r.min_length) ||
                 (r.max_length >= 0 && span->first > r.max_length)))
      return false;
  }
  return true;
}

const Grammar& ShapeReader::compiled(const std::string& regex) {
  auto it = regexes_.find(regex);
  if (it == regexes_.end()) it = regexes_.emplace(regex, compile_regex(regex)).first;
  return it->second;
}

bool ShapeReader::full_match(const std::string& regex, const std::string& text) {
  Matcher m(compiled(regex));
  return m.advance(text) && m.can_end();
}

bool ShapeReader::pattern_found(const std::string& pattern, const std::string& text,
                                Formats formats) {
  return full_match(searched(pattern, "(?:.|\\n)*", formats == Formats::kIgnored), text);
}

bool ShapeReader::accepts(const Shape& shape, const json& v, Formats formats, int depth) {
  return std::any_of(shape.begin(), shape.end(),
                     [&](const Branch& b) { return accepts(b, v, formats, depth); });
}

bool ShapeReader::accepts(const Branch& b, const json& v, Formats formats, int depth) {
  if (depth > limits_.max_depth)
    fail("JSON schema: a value nested deeper than ", limits_.max_depth, " to test against it");
  switch (b.kind) {
    case Kind::kNull:
      if (!v.is_null()) return false;
      break;
    case Kind::kBoolean:
      if (!v.is_boolean()) return false;
      break;
    case Kind::kInteger:
      if (!v.is_number() || !integral(v)) return false;
      break;
    case Kind::kNumber:
      if (!v.is_number()) return false;
      break;
    case Kind::kString:
      if (!v.is_string()) return false;
      break;
    case Kind::kArray:
      if (!v.is_array()) return false;
      break;
    case Kind::kObject:
      if (!v.is_object()) return false;
      break;
  }
  if (b.values)
    return std::any_of(b.values->begin(), b.values->end(),
                       [&](const json& x) { return same_value(x, v); });
  switch (b.kind) {
    case Kind::kInteger:
    case Kind::kNumber: {
      const std::optional<Decimal> d = decimal_of(v);
      if (!d) return false;
      if (b.minimum.value) {
        const int c = compare(*d, *b.minimum.value);
        if (c < 0 || (c == 0 && b.minimum.exclusive)) return false;
      }
      if (b.maximum.value) {
        const int c = compare(*d, *b.maximum.value);
        if (c > 0 || (c == 0 && b.maximum.exclusive)) return false;
      }
      return !(b.not_integer && integral(v));
    }
    case Kind::kString: {
      const std::string& s = v.get_ref<const std::string&>();
      const int n = static_cast<int>(utf8::count(s));
      if (n < b.string.min_length || (b.string.max_length >= 0 && n > b.string.max_length))
        return false;
      for (const std::string& p : b.string.patterns)
        if (!pattern_found(p, s, formats)) return false;
      if (formats == Formats::kAsserted)
        for (const std::string& f : b.string.formats)
          for (const auto& [name, regex] : schema_formats())
            if (name == f && !full_match(regex, s)) return false;
      return true;
    }
    case Kind::kArray: {
      const ArrayRules& a = b.array;
      const int n = static_cast<int>(v.size());
      if (n < a.min_items || (a.max_items >= 0 && n > a.max_items)) return false;
      for (size_t i = 0; i < v.size(); ++i) {
        std::optional<Conjunction> c = item_at(a, i);
        if (!c || !accepts(read(*c, depth + 1), v[i], formats, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kObject: {
      const ObjectRules& o = b.object;
      const int n = static_cast<int>(v.size());
      if (n < o.min_properties || (o.max_properties >= 0 && n > o.max_properties)) return false;
      for (const std::string& name : o.required)
        if (!v.contains(name)) return false;
      for (auto it = v.begin(); it != v.end(); ++it) {
        std::optional<Conjunction> c;
        for (const auto& [name, schemas] : o.properties)
          if (name == it.key()) c = schemas;
        if (!c) c = open_member(o.open, it.key());
        if (!c || !accepts(read(*c, depth + 1), it.value(), formats, depth + 1)) return false;
        if (o.property_names &&
            !accepts(read(*o.property_names, depth + 1), json(it.key()), formats, depth + 1))
          return false;
      }
      return true;
    }
    default:
      return true;
  }
}

}  // namespace tpllama::grammar
