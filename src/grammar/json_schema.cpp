// JSON Schema into grammar rules, keyword by keyword (the header lists what is read).
#include "grammar/json_schema.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "grammar/regex.h"

namespace tpllama::grammar {
namespace {

using json = nlohmann::ordered_json;
using Seq = GrammarBuilder::Sequence;

// Annotations: they describe, they do not validate.
const std::set<std::string> kAnnotations = {"title",    "description", "examples", "default",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly"};
const std::set<std::string> kKeywords = {"type",        "properties",
                                         "required",    "additionalProperties",
                                         "enum",        "const",
                                         "anyOf",       "oneOf",
                                         "allOf",       "items",
                                         "prefixItems", "minItems",
                                         "maxItems",    "minLength",
                                         "maxLength",   "pattern",
                                         "format",      "$ref",
                                         "$defs",       "definitions",
                                         "minimum",     "exclusiveMinimum"};

// Regexes of the string formats, over the decoded string.
const std::map<std::string, std::string> kFormats = {
    {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
    {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"date-time",
     R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
    {"email", R"([a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,})"},
};

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const JsonSchemaLimits& limits)
      : root_(root), limits_(limits), b_(limits.grammar) {}

  Grammar compile() {
    const uint32_t top = b_.rule("root");
    b_.add_alternative(top, value(root_, "#", 0));
    return b_.build(top);
  }

  Grammar any_object() {
    const uint32_t top = b_.rule("root");
    b_.add_alternative(top, map_of(any_value()));
    return b_.build(top);
  }

 private:
  [[noreturn]] static void refuse(const std::string& where, const std::string& what) {
    fail("JSON schema at ", where, ": ", what);
  }
  static void append(Seq& to, const Seq& more) { to.insert(to.end(), more.begin(), more.end()); }
  Seq literal(const std::string& text) { return b_.literal(text); }
  // A rule with these alternatives, as one symbol.
  Seq one_of(std::vector<Seq> alternatives, const std::string& hint) {
    if (alternatives.size() == 1) return alternatives.front();
    const uint32_t r = b_.fresh_rule(hint);
    for (Seq& alt : alternatives) b_.add_alternative(r, std::move(alt));
    return {GrammarBuilder::ref(r)};
  }

  // Between tokens: nothing, a space, or a newline and up to 20 spaces or tabs of indentation (as
  // llama.cpp's schema grammars): pretty-printed output, and no runs of blank lines.
  Seq ws() {
    if (!ws_) {
      ByteSet indent;
      indent.add(static_cast<uint8_t>(' '));
      indent.add(static_cast<uint8_t>('\t'));
      const uint32_t r = b_.fresh_rule("ws");
      b_.add_alternative(r, {});
      b_.add_alternative(r, {b_.byte(' ')});
      b_.add_alternative(r, {b_.byte('\n'), b_.repeat({b_.bytes(indent)}, 0, 20, "indent")});
      ws_ = GrammarBuilder::ref(r);
    }
    return {*ws_};
  }
  // The rule of a symbol made once.
  template <typename Make>
  Seq cached(std::optional<GrammarBuilder::Symbol>& slot, const std::string& name, Make make) {
    if (!slot) {
      const uint32_t r = b_.rule(name);
      slot = GrammarBuilder::ref(r);
      for (Seq& alt : make()) b_.add_alternative(r, std::move(alt));
    }
    return {*slot};
  }

  // One character of a JSON string's content: a plain one or an escape.
  Seq string_char() {
    return cached(char_, "char", [&] {
      RegexOptions plain;
      plain.json_string = true;
      return std::vector<Seq>{{add_regex(b_, ".", plain)},
                              {add_regex(b_, R"(\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))")}};
    });
  }
  Seq any_string() {
    return cached(string_, "string", [&] {
      Seq s = literal("\"");
      s.push_back(b_.repeat(string_char(), 0, -1, "chars"));
      append(s, literal("\""));
      return std::vector<Seq>{s};
    });
  }
  Seq number() {
    return cached(number_, "number", [&] {
      return std::vector<Seq>{{add_regex(b_, R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)")}};
    });
  }
  Seq integer(const std::string& sign) {
    return {add_regex(b_, sign == "+"    ? "0|[1-9][0-9]*"
                          : sign == "++" ? "[1-9][0-9]*"
                                         : "-?(0|[1-9][0-9]*)")};
  }
  // open ws inside ws close: an object's or an array's brackets around its contents.
  Seq bracketed(const char* open, const Seq& inside, const char* close) {
    Seq s = literal(open);
    append(s, ws());
    append(s, inside);
    append(s, ws());
    append(s, literal(close));
    return s;
  }

  // ws , ws v: an item or member after the first.
  Seq comma_then(const Seq& v) {
    Seq s = ws();
    append(s, literal(","));
    append(s, ws());
    append(s, v);
    return s;
  }

  // {} or { "key": value, ... } with values of `v`.
  Seq map_of(const Seq& v) {
    Seq pair = any_string();
    append(pair, ws());
    append(pair, literal(":"));
    append(pair, ws());
    append(pair, v);
    const Seq more = comma_then(pair);
    Seq pairs = pair;
    pairs.push_back(b_.repeat(more, 0, -1, "pairs"));
    return bracketed("{", {b_.repeat(pairs, 0, 1, "members")}, "}");
  }
  // v, then [ws , ws v] so that there are min..max of them in all (max < 0: no bound); min 0
  // allows none.
  Seq list_of(const Seq& v, int min, int max) {
    const Seq more = comma_then(v);
    Seq items = v;
    items.push_back(
        b_.repeat(more, std::max(min - 1, 0), max < 0 ? -1 : std::max(max - 1, 0), "items"));
    if (min > 0) return items;
    if (max == 0) return {};
    return {b_.repeat(items, 0, 1, "list")};
  }
  Seq any_value() {
    return cached(any_, "value", [&] {
      Seq array = literal("[");
      append(array, ws());
      append(array, list_of(any_value(), 0, -1));
      append(array, ws());
      append(array, literal("]"));
      return std::vector<Seq>{
          map_of(any_value()), array,          any_string(), number(), literal("true"),
          literal("false"),    literal("null")};
    });
  }

  int count(const json& schema, const char* key, const std::string& where, int fallback) const {
    auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > static_cast<uint64_t>(limits_.max_items))
      refuse(where, std::string("'") + key + "' must be an integer from 0 to " +
                        std::to_string(limits_.max_items) + ", got " + it->dump());
    return static_cast<int>(it->get<uint64_t>());
  }

  Seq value(const json& schema, const std::string& where, int depth) {
    if (depth > limits_.max_depth)
      refuse(where, "nested deeper than " + std::to_string(limits_.max_depth));
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) refuse(where, "the schema false matches nothing");
      return any_value();
    }
    if (!schema.is_object()) refuse(where, "a schema must be an object or a boolean");
    for (auto it = schema.begin(); it != schema.end(); ++it)
      if (!kKeywords.count(it.key()) && !kAnnotations.count(it.key()))
        refuse(where, "the keyword '" + it.key() + "' is not supported");
    if (auto ref = schema.find("$ref"); ref != schema.end()) {
      for (auto it = schema.begin(); it != schema.end(); ++it)
        if (it.key() != "$ref" && it.key() != "$defs" && it.key() != "definitions" &&
            !kAnnotations.count(it.key()))
          refuse(where, "'$ref' beside '" + it.key() + "' is not supported");
      return reference(*ref, where, depth);
    }
    if (auto c = schema.find("const"); c != schema.end()) return literal(c->dump());
    if (auto e = schema.find("enum"); e != schema.end()) {
      if (!e->is_array() || e->empty() || e->size() > limits_.max_enum)
        refuse(where,
               "'enum' must be a list of 1 to " + std::to_string(limits_.max_enum) + " values");
      std::vector<Seq> alternatives;
      for (const json& v : *e) alternatives.push_back(literal(v.dump()));
      return one_of(std::move(alternatives), "enum");
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_array() || it->empty())
        refuse(where, std::string("'") + key + "' must be a non-empty list");
      if (std::string(key) == "allOf" && it->size() > 1)
        refuse(where, "'allOf' of more than one schema is not supported");
      std::vector<Seq> alternatives;
      for (size_t i = 0; i < it->size(); ++i)
        alternatives.push_back(
            value((*it)[i], where + "/" + key + "/" + std::to_string(i), depth + 1));
      return one_of(std::move(alternatives), key);
    }
    return typed(schema, where, depth);
  }

  Seq typed(const json& schema, const std::string& where, int depth) {
    std::vector<std::string> types;
    if (auto t = schema.find("type"); t != schema.end()) {
      if (t->is_string()) {
        types.push_back(*t);
      } else if (t->is_array() && !t->empty()) {
        for (const json& one : *t) {
          if (!one.is_string()) refuse(where, "'type' lists a non-string " + one.dump());
          types.push_back(one);
        }
      } else {
        refuse(where, "'type' must be a string or a list of strings");
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties")) {
      types = {"object"};
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      types = {"array"};
    } else if (schema.contains("pattern") || schema.contains("format") ||
               schema.contains("minLength") || schema.contains("maxLength")) {
      types = {"string"};
    } else {
      return any_value();
    }
    std::vector<Seq> alternatives;
    for (const std::string& type : types) {
      if (type == "object")
        alternatives.push_back(object(schema, where, depth));
      else if (type == "array")
        alternatives.push_back(array(schema, where, depth));
      else if (type == "string")
        alternatives.push_back(string(schema, where));
      else if (type == "integer")
        alternatives.push_back(integer(sign(schema, where)));
      else if (type == "number" &&
               (schema.contains("minimum") || schema.contains("exclusiveMinimum")))
        refuse(where, "a number's 'minimum' is not supported (an integer's 0 or 1 is)");
      else if (type == "number")
        alternatives.push_back(number());
      else if (type == "boolean")
        alternatives.push_back(one_of({literal("true"), literal("false")}, "boolean"));
      else if (type == "null")
        alternatives.push_back(literal("null"));
      else
        refuse(where, "unknown type '" + type + "'");
    }
    return one_of(std::move(alternatives), "type");
  }

  // An integer's lower bound, where it is cheap: minimum 0 ("+") or 1 ("++").
  std::string sign(const json& schema, const std::string& where) const {
    auto min = schema.find("minimum");
    auto exclusive = schema.find("exclusiveMinimum");
    if (min == schema.end() && exclusive == schema.end()) return "";
    const json& bound = min != schema.end() ? *min : *exclusive;
    if (min != schema.end() && exclusive != schema.end())
      refuse(where, "'minimum' with 'exclusiveMinimum' is not supported");
    if (!bound.is_number_integer()) refuse(where, "a minimum that is not an integer");
    const int64_t lowest = bound.get<int64_t>() + (exclusive != schema.end() ? 1 : 0);
    if (lowest == 0) return "+";
    if (lowest == 1) return "++";
    refuse(where, "an integer minimum other than 0 or 1 is not supported");
  }

  Seq string(const json& schema, const std::string& where) {
    const bool sized = schema.contains("minLength") || schema.contains("maxLength");
    auto pattern = schema.find("pattern");
    auto format = schema.find("format");
    if ((pattern != schema.end()) + (format != schema.end()) + sized > 1)
      refuse(where, "'pattern', 'format' and lengths together are not supported");
    Seq s = literal("\"");
    if (pattern != schema.end() || format != schema.end()) {
      std::string regex;
      if (pattern != schema.end()) {
        if (!pattern->is_string()) refuse(where, "'pattern' must be a string");
        regex = *pattern;
        // JSON Schema's pattern searches: a side without an anchor may have text around it.
        const bool start = !regex.empty() && regex.front() == '^';
        const bool end = !regex.empty() && regex.back() == '$';
        if (start) regex.erase(0, 1);
        if (end) regex.pop_back();
        regex = (start ? "" : ".*") + std::string("(?:") + regex + ")" + (end ? "" : ".*");
      } else {
        auto it = format->is_string() ? kFormats.find(*format) : kFormats.end();
        if (it == kFormats.end())
          refuse(where, "the format " + format->dump() + " is not supported");
        regex = it->second;
      }
      RegexOptions options;
      options.json_string = true;
      try {
        s.push_back(add_regex(b_, regex, options));
      } catch (const Error& e) {
        refuse(where, e.what());
      }
    } else if (sized) {
      const int min = count(schema, "minLength", where, 0);
      const int max = count(schema, "maxLength", where, -1);
      if (max >= 0 && max < min) refuse(where, "'maxLength' below 'minLength'");
      s.push_back(b_.repeat(string_char(), min, max, "chars"));
    } else {
      return any_string();
    }
    append(s, literal("\""));
    return s;
  }

  Seq object(const json& schema, const std::string& where, int depth) {
    auto props = schema.find("properties");
    auto extra = schema.find("additionalProperties");
    const bool has_props = props != schema.end() && !props->empty();
    if (props != schema.end() && !props->is_object())
      refuse(where, "'properties' must be an object");
    if (extra != schema.end() && !(extra->is_boolean() && !extra->get<bool>())) {
      if (has_props)
        refuse(where,
               "'additionalProperties' other than false beside 'properties' is not supported");
      return map_of(value(*extra, where + "/additionalProperties", depth + 1));
    }
    std::set<std::string> required;
    if (auto r = schema.find("required"); r != schema.end()) {
      if (!r->is_array()) refuse(where, "'required' must be a list of names");
      for (const json& name : *r) {
        if (!name.is_string() || !has_props || !props->contains(name.get<std::string>()))
          refuse(where, "'required' names " + name.dump() + ", which 'properties' does not have");
        required.insert(name);
      }
    }
    // The properties in order, each optional one maybe left out, commas between those written:
    // first[i] (none written yet) and rest[i] (some written) for the properties from i on.
    std::vector<std::pair<Seq, bool>> members;  // "key": value, and whether required
    if (has_props)
      for (auto it = props->begin(); it != props->end(); ++it) {
        Seq kv = literal(json(it.key()).dump());
        append(kv, ws());
        append(kv, literal(":"));
        append(kv, ws());
        append(kv, value(it.value(), where + "/properties/" + it.key(), depth + 1));
        members.emplace_back(std::move(kv), required.count(it.key()) > 0);
      }
    Seq first_next, rest_next;  // of the properties after i: empty at the end
    for (size_t i = members.size(); i-- > 0;) {
      const auto& [kv, needed] = members[i];
      const uint32_t first = b_.fresh_rule("first"), rest = b_.fresh_rule("rest");
      Seq take_first = kv;
      append(take_first, rest_next);
      b_.add_alternative(first, std::move(take_first));
      if (!needed) b_.add_alternative(first, first_next);
      Seq take_rest = comma_then(kv);
      append(take_rest, rest_next);
      b_.add_alternative(rest, std::move(take_rest));
      if (!needed) b_.add_alternative(rest, rest_next);
      first_next = {GrammarBuilder::ref(first)};
      rest_next = {GrammarBuilder::ref(rest)};
    }
    return bracketed("{", first_next, "}");
  }

  Seq array(const json& schema, const std::string& where, int depth) {
    const int min = count(schema, "minItems", where, 0);
    const int max = count(schema, "maxItems", where, -1);
    if (max >= 0 && max < min) refuse(where, "'maxItems' below 'minItems'");
    std::vector<Seq> prefix;
    if (auto p = schema.find("prefixItems"); p != schema.end()) {
      if (!p->is_array()) refuse(where, "'prefixItems' must be a list of schemas");
      for (size_t i = 0; i < p->size(); ++i)
        prefix.push_back(value((*p)[i], where + "/prefixItems/" + std::to_string(i), depth + 1));
    }
    auto items = schema.find("items");
    // After prefixItems, no more items unless 'items' says which (strict, as for objects).
    const bool more =
        items != schema.end() ? !(items->is_boolean() && !items->get<bool>()) : prefix.empty();
    Seq item =
        more ? (items != schema.end() ? value(*items, where + "/items", depth + 1) : any_value())
             : Seq{};
    Seq list;
    if (prefix.empty()) {
      list = list_of(item, min, max);
    } else {
      // The items after the prefix, once all of it is there; then the prefix from its end, each
      // item past minItems optional (an array may stop inside its prefixItems).
      const int k = std::min(static_cast<int>(prefix.size()), max < 0 ? INT32_MAX : max);
      Seq after;
      if (more && (max < 0 || max > k))
        after.push_back(
            b_.repeat(comma_then(item), std::max(min - k, 0), max < 0 ? -1 : max - k, "items"));
      Seq suffix = after;  // what follows prefix item i - 1
      for (int i = k - 1; i >= 0; --i) {
        Seq with = i > 0 ? comma_then(prefix[static_cast<size_t>(i)]) : prefix[0];
        append(with, suffix);
        suffix = i < min ? with : Seq{b_.repeat(with, 0, 1, "prefix")};
      }
      list = suffix;
    }
    return bracketed("[", list, "]");
  }

  // The rule of a local reference, made once (a recursive schema refers to its own rule).
  Seq reference(const json& ref, const std::string& where, int depth) {
    if (!ref.is_string()) refuse(where, "'$ref' must be a string");
    const std::string path = ref;
    if (auto it = refs_.find(path); it != refs_.end()) return {GrammarBuilder::ref(it->second)};
    const json* target = nullptr;
    if (path == "#") {
      target = &root_;
    } else {
      for (const char* defs : {"#/$defs/", "#/definitions/"}) {
        const std::string prefix = defs;
        if (path.rfind(prefix, 0) != 0) continue;
        const std::string name = path.substr(prefix.size());
        auto table = root_.find(prefix.substr(2, prefix.size() - 3));
        if (table == root_.end() || !table->is_object()) continue;
        if (auto it = table->find(name); it != table->end()) target = &*it;
      }
    }
    if (target == nullptr)
      refuse(where, "'$ref' " + ref.dump() + " is not a local reference this schema defines");
    const uint32_t rule = b_.fresh_rule("ref");
    refs_.emplace(path, rule);
    b_.add_alternative(rule, value(*target, path, depth + 1));
    return {GrammarBuilder::ref(rule)};
  }

  const json& root_;
  JsonSchemaLimits limits_;
  GrammarBuilder b_;
  std::map<std::string, uint32_t> refs_;
  std::optional<GrammarBuilder::Symbol> ws_, char_, string_, number_, any_;
};

}  // namespace

Grammar compile_json_schema(const json& schema, const JsonSchemaLimits& limits) {
  return SchemaCompiler(schema, limits).compile();
}

Grammar json_object_grammar() {
  static const json kEmpty = json::object();
  return SchemaCompiler(kEmpty, {}).any_object();
}

}  // namespace tpllama::grammar
