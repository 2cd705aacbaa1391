// JSON Schema into grammar rules: each place's shape (schema_shape.h), branch by branch, one rule
// per place (a recursive schema refers to its own rule).
#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/regex.h"

namespace tpllama::grammar {
namespace {

using json = SchemaJson;
using Seq = GrammarBuilder::Sequence;

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  fail("JSON schema at ", where, ": ", what);
}

bool listed(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// A fully anchored pattern of one character class (or escape, or `.`) under one quantifier:
// its atom and repeat bounds (max -1: none). The common shape a length bound can join.
bool single_atom(const std::string& pattern, std::string& atom, int& lo, int& hi) {
  if (pattern.size() < 3 || pattern.front() != '^' || pattern.back() != '$') return false;
  const std::string body = pattern.substr(1, pattern.size() - 2);
  size_t i = 0;
  if (body.empty()) return false;
  if (body[0] == '[') {
    i = 1;
    if (i < body.size() && body[i] == '^') ++i;
    if (i < body.size() && body[i] == ']') ++i;
    for (; i < body.size() && body[i] != ']'; ++i)
      if (body[i] == '\\') ++i;
    if (i >= body.size()) return false;
    ++i;
  } else if (body[0] == '\\') {
    if (body.size() < 2 || std::string("dDwWsS").find(body[1]) == std::string::npos) return false;
    i = 2;
  } else if (body[0] == '.' || std::isalnum(static_cast<unsigned char>(body[0]))) {
    i = 1;
  } else {
    return false;
  }
  atom = body.substr(0, i);
  std::string q = body.substr(i);
  if (!q.empty() && q.size() > 1 && q.back() == '?') q.pop_back();  // lazy: the same texts
  if (q == "*") {
    lo = 0, hi = -1;
  } else if (q == "+") {
    lo = 1, hi = -1;
  } else if (q == "?") {
    lo = 0, hi = 1;
  } else if (q.size() >= 3 && q.front() == '{' && q.back() == '}') {
    const std::string inner = q.substr(1, q.size() - 2);
    const size_t comma = inner.find(',');
    const auto number = [](const std::string& s, int& out) {
      if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
        return false;
      out = std::stoi(s);
      return true;
    };
    if (comma == std::string::npos) {
      if (!number(inner, lo)) return false;
      hi = lo;
    } else {
      if (!number(inner.substr(0, comma), lo)) return false;
      const std::string upper = inner.substr(comma + 1);
      hi = -1;
      if (!upper.empty() && !number(upper, hi)) return false;
    }
  } else {
    return false;
  }
  return true;
}

// A code point as a regex escape.
std::string escaped(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(c));
  return buf;
}

// The names below a point of a trie of names, as a regex of every string that is none of them.
struct NameTrie {
  std::map<char32_t, NameTrie> next;
  bool name = false;

  void add(const std::string& s) {
    NameTrie* t = this;
    for (size_t i = 0; i < s.size();) t = &t->next[utf8::decode(s, i)];
    t->name = true;
  }
  std::string others() const {
    std::vector<std::string> alts;
    if (next.empty()) {
      alts.push_back("..*");
    } else {
      std::string other_char = "[^";
      for (const auto& [c, t] : next) other_char += escaped(c);
      alts.push_back(other_char + "].*");
      for (const auto& [c, t] : next) alts.push_back(escaped(c) + t.others());
    }
    std::string group = "(?:";
    for (size_t i = 0; i < alts.size(); ++i) group += (i ? "|" : "") + alts[i];
    group += ")";
    return name ? group : group + "?";
  }
};

class Emitter {
 public:
  Emitter(const json& root, const JsonSchemaOptions& options)
      : root_(root), o_(options), reader_(root, options.shape), b_(options.grammar) {}

  Grammar compile() {
    const uint32_t top = b_.rule("root");
    Conjunction c;
    c.parts.emplace_back(&root_, "#");
    const std::optional<Seq> v = value(c, 0);
    if (!v && reader_.format_refused())
      refuse("#", "the grammar can write none of the schema's values: " +
                      reader_.format_refused()->dump() +
                      " is not of its format as tpllama writes it (RFC 3339 and RFC 4122 forms, "
                      "dates that exist)");
    if (!v)
      refuse("#", reader_.read(c, 0).empty()
                      ? "no value satisfies the schema"
                      : "the grammar can write none of the schema's values (a number of more than "
                        "--json-max-digits digits, a string its pattern and lengths allow)");
    b_.add_alternative(top, *v);
    return b_.build(top);
  }

 private:
  static void append(Seq& to, const Seq& more) { to.insert(to.end(), more.begin(), more.end()); }
  Seq literal(const std::string& text) { return b_.literal(text); }
  Seq one_of(std::vector<Seq> alternatives, const std::string& hint) {
    if (alternatives.size() == 1) return alternatives.front();
    const uint32_t r = b_.fresh_rule(hint);
    for (Seq& alt : alternatives) b_.add_alternative(r, std::move(alt));
    return {GrammarBuilder::ref(r)};
  }
  Seq regex(const std::string& text, bool json_string) {
    const std::string key = (json_string ? "s:" : "n:") + text;
    if (auto it = regexes_.find(key); it != regexes_.end()) return {it->second};
    RegexOptions options;
    options.json_string = json_string;
    const GrammarBuilder::Symbol s = add_regex(b_, text, options);
    regexes_.emplace(key, s);
    return {s};
  }

  // Between tokens: nothing, a space, or a newline and up to 20 spaces or tabs of indentation (as
  // llama.cpp's schema grammars): pretty-printed output, and no runs of blank lines.
  Seq ws() {
    if (!o_.any_whitespace) return {};
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
  // One character of a JSON string's content: a plain one, or an escape (of one character: a
  // surrogate's \u escape would be half of one, and lengths are counted in characters).
  Seq string_char() {
    if (!char_) {
      const uint32_t r = b_.rule("char");
      char_ = GrammarBuilder::ref(r);
      b_.add_alternative(r, regex(".", true));
      b_.add_alternative(
          r, regex(R"(\\(["\\/bfnrt]|u([0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})))",
                   false));
    }
    return {*char_};
  }
  Seq quoted(const Seq& content) {
    Seq s = literal("\"");
    append(s, content);
    append(s, literal("\""));
    return s;
  }
  Seq bracketed(const char* open, const Seq& inside, const char* close) {
    Seq s = literal(open);
    append(s, ws());
    append(s, inside);
    append(s, ws());
    append(s, literal(close));
    return s;
  }
  // An array or object: empty (one whitespace between its brackets, so no blank line), and with
  // the contents `nonempty` (nullopt: never).
  Seq container(const char* open, const std::optional<Seq>& nonempty, bool may_be_empty,
                const char* close) {
    std::vector<Seq> alternatives;
    if (may_be_empty) {
      Seq empty = literal(open);
      append(empty, ws());
      append(empty, literal(close));
      alternatives.push_back(std::move(empty));
    }
    if (nonempty) alternatives.push_back(bracketed(open, *nonempty, close));
    return one_of(std::move(alternatives), "container");
  }
  // ws , ws v: an item or member after the first.
  Seq comma_then(const Seq& v) {
    Seq s = ws();
    append(s, literal(","));
    append(s, ws());
    append(s, v);
    return s;
  }
  // v, then [ws , ws v] so that there are min..max of them in all (max < 0: no bound); min 0
  // allows none.
  Seq list_of(const Seq& v, int min, int max) {
    if (max == 0) return {};
    Seq items = v;
    items.push_back(b_.repeat(comma_then(v), std::max(min - 1, 0),
                              max < 0 ? -1 : std::max(max - 1, 0), "items"));
    if (min > 0) return items;
    return {b_.repeat(items, 0, 1, "list")};
  }

  // The branches the grammar writes: those a type or keyword asked for, where there are some.
  static Shape writable(const Shape& s) {
    Shape named;
    for (const Branch& b : s)
      if (b.named) named.push_back(b);
    return named.empty() ? s : named;
  }
  // The values of a place, as one rule made once; nullopt where the grammar writes none (no value
  // satisfies its schemas, or none within what the grammar writes), which the caller then leaves
  // out (an optional property, the items past a prefix) or is itself left out for.
  std::optional<Seq> value(const Conjunction& c, int depth) {
    const std::string key = c.key();
    if (auto it = rules_.find(key); it != rules_.end()) {
      if (!it->second) return std::nullopt;
      if (!done_.count(*it->second)) recursive_.insert(*it->second);
      return Seq{GrammarBuilder::ref(*it->second)};
    }
    const Shape written = writable(reader_.read(c, depth));
    if (written.empty()) {
      rules_.emplace(key, std::nullopt);
      return std::nullopt;
    }
    const uint32_t r = b_.fresh_rule("value");
    rules_.emplace(key, r);
    size_t alternatives = 0;
    for (const Branch& branch : written)
      if (std::optional<Seq> s = branch_text(branch, c.where(), depth)) {
        b_.add_alternative(r, std::move(*s));
        ++alternatives;
      }
    done_.insert(r);
    if (alternatives > 0) return Seq{GrammarBuilder::ref(r)};
    // A rule its own values refer to (recursion) cannot be taken back once they do.
    if (recursive_.count(r))
      refuse(c.where(), "the grammar can write none of the schema's values, which refer to it");
    b_.add_alternative(r, {b_.bytes(ByteSet{})});  // defined, matching nothing; referred to by none
    rules_[key] = std::nullopt;
    return std::nullopt;
  }

  // One value of an enum or const, with whitespace between its tokens as any value may have.
  Seq written_value(const json& v) {
    if (v.is_array() && !v.empty()) {
      Seq items = written_value(v[0]);
      for (size_t i = 1; i < v.size(); ++i) append(items, comma_then(written_value(v[i])));
      return bracketed("[", items, "]");
    }
    if (v.is_object() && !v.empty()) {
      Seq members;
      for (auto it = v.begin(); it != v.end(); ++it) {
        const Seq m = member(literal(json(it.key()).dump()), written_value(it.value()));
        append(members, it == v.begin() ? m : comma_then(m));
      }
      return bracketed("{", members, "}");
    }
    return literal(v.dump());
  }

  std::optional<Seq> branch_text(const Branch& b, const std::string& where, int depth) {
    if (b.values) {
      std::vector<Seq> alternatives;
      for (const json& v : *b.values) alternatives.push_back(written_value(v));
      return one_of(std::move(alternatives), "enum");
    }
    switch (b.kind) {
      case Kind::kNull:
        return literal("null");
      case Kind::kBoolean:
        return one_of({literal("true"), literal("false")}, "boolean");
      case Kind::kInteger: {
        const std::optional<std::string> r = integer_range_regex(b.minimum, b.maximum, o_.digits);
        if (!r) return std::nullopt;
        return regex(*r, false);
      }
      case Kind::kNumber: {
        const std::optional<std::string> r =
            number_range_regex(b.minimum, b.maximum, o_.digits, b.not_integer);
        if (!r) return std::nullopt;
        return regex(*r, false);
      }
      case Kind::kString:
        return string_text(b.string, where);
      case Kind::kArray:
        return array_text(b.array, depth);
      case Kind::kObject:
        return object_text(b.object, where, depth);
    }
    return std::nullopt;
  }

  std::optional<Seq> string_text(const StringRules& r, const std::string& where) {
    // The pattern or format (at most one) as a regex over the whole string, and what it was.
    std::vector<std::pair<std::string, std::string>> regexes;
    for (const std::string& p : r.patterns)
      regexes.emplace_back(searched(p, ".*"), "'pattern' " + json(p).dump());
    for (const std::string& f : r.formats)
      for (const auto& [name, text] : schema_formats())
        if (name == f) regexes.emplace_back(text, "'format' " + json(f).dump());
    if (regexes.size() > 1)
      refuse(where, regexes[0].second + " beside " + regexes[1].second +
                        " is not supported (one pattern or format per string)");
    const bool bounded = r.min_length > 0 || r.max_length >= 0;
    if (regexes.empty()) {
      if (!bounded) return any_string();
      return quoted({b_.repeat(string_char(), r.min_length, r.max_length, "chars")});
    }
    const auto& [text, what] = regexes.front();
    if (bounded) {
      RegexOptions options;
      options.json_string = true;
      const std::optional<std::pair<int, int>> span = char_range(compile_regex(text, options));
      const bool implied =
          span && span->first >= r.min_length &&
          (r.max_length < 0 || (span->second >= 0 && span->second <= r.max_length));
      const bool disjoint = span && ((span->second >= 0 && span->second < r.min_length) ||
                                     (r.max_length >= 0 && span->first > r.max_length));
      std::string atom;
      int lo = 0, hi = -1;
      if (disjoint) return std::nullopt;
      if (!implied && r.patterns.empty() && r.formats.front() == "email")
        return bounded_email(r.min_length, r.max_length);
      if (!implied) {
        if (r.patterns.empty() || !single_atom(r.patterns.front(), atom, lo, hi))
          refuse(where, what +
                            " with 'minLength'/'maxLength' it does not imply is not supported "
                            "(a pattern of one quantified character class is)");
        lo = std::max(lo, r.min_length);
        hi = hi < 0 ? r.max_length : (r.max_length < 0 ? hi : std::min(hi, r.max_length));
        if (hi >= 0 && lo > hi) return std::nullopt;
        return quoted(regex(atom + "{" + std::to_string(lo) + "," +
                                (hi < 0 ? std::string() : std::to_string(hi)) + "}",
                            true));
      }
    }
    return quoted(regex(text, true));
  }
  // An email of min..max characters (max -1: no bound): local part, one domain label and a
  // top-level label, each bounded so that the lengths add up within. A subset of the format's.
  std::optional<Seq> bounded_email(int min, int max) {
    const std::string local = "[a-zA-Z0-9._%+-]", label = "[a-zA-Z0-9-]", top = "[a-zA-Z]";
    const int local_min = std::max(1, min - 5);  // with a@b.cc's other 5 at their shortest
    if (max < 0)
      return quoted(regex(local + "{" + std::to_string(local_min) + ",}@" + label + "+(\\." +
                              label + "+)*\\." + top + "{2,}",
                          true));
    const int budget = max - 2;                  // '@' and '.'
    const int slack = budget - (local_min + 3);  // past the shortest parts
    if (slack < 0) return std::nullopt;
    const int top_max = 2 + std::min(4, slack / 3);
    const int label_max = 1 + slack / 3;
    const int local_max = budget - top_max - label_max;
    return quoted(regex(local + "{" + std::to_string(local_min) + "," + std::to_string(local_max) +
                            "}@" + label + "{1," + std::to_string(label_max) + "}\\." + top +
                            "{2," + std::to_string(top_max) + "}",
                        true));
  }

  Seq any_string() {
    if (!string_) {
      const uint32_t r = b_.rule("string");
      string_ = GrammarBuilder::ref(r);
      b_.add_alternative(r, quoted({b_.repeat(string_char(), 0, -1, "chars")}));
    }
    return {*string_};
  }

  std::optional<Seq> array_text(const ArrayRules& a, int depth) {
    int max = a.max_items;
    const int min = a.min_items;
    std::vector<Seq> prefix;
    bool cut = false;  // an item of the prefix no value fills: the array ends before it
    for (size_t i = 0; i < a.prefix.size(); ++i) {
      if (max >= 0 && static_cast<int>(i) >= max) break;
      std::optional<Seq> v = value(a.prefix[i], depth + 1);
      if (!v) {
        max = max < 0 ? static_cast<int>(i) : std::min(max, static_cast<int>(i));
        cut = true;
        break;
      }
      prefix.push_back(std::move(*v));
    }
    Rest rest = cut ? Rest::kNone : a.rest;
    Conjunction items = a.items;
    if (rest == Rest::kUnwritten) {  // written only where minItems needs them
      rest = min > static_cast<int>(prefix.size()) ? Rest::kSchema : Rest::kNone;
      items = {};
    }
    std::optional<Seq> item_value;
    if (rest == Rest::kSchema) item_value = value(items, depth + 1);
    if (!item_value) rest = Rest::kNone;
    const int k = static_cast<int>(prefix.size());
    if (rest == Rest::kNone) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && min > max) return std::nullopt;
    const Seq item = item_value ? *item_value : Seq{};
    if (prefix.empty()) {
      if (max == 0) return container("[", std::nullopt, true, "]");
      return container("[", list_of(item, std::max(min, 1), max), min == 0, "]");
    }
    // The items after the prefix, once all of it is there; then the prefix from its end, each
    // item past minItems optional (an array may stop inside its prefixItems).
    Seq suffix;
    if (rest == Rest::kSchema && (max < 0 || max > k))
      suffix.push_back(
          b_.repeat(comma_then(item), std::max(min - k, 0), max < 0 ? -1 : max - k, "items"));
    for (int i = k - 1; i >= 1; --i) {
      Seq with = comma_then(prefix[static_cast<size_t>(i)]);
      append(with, suffix);
      suffix = i < min ? with : Seq{b_.repeat(with, 0, 1, "prefix")};
    }
    Seq first = prefix[0];
    append(first, suffix);
    return container("[", first, min == 0, "]");
  }

  // "name" ws : ws value
  Seq member(const Seq& key, const Seq& v) {
    Seq s = key;
    append(s, ws());
    append(s, literal(":"));
    append(s, ws());
    append(s, v);
    return s;
  }

  // The members the properties do not name that the grammar writes (a key and its value), or
  // nullopt for none. `needed`: minProperties asks for members the properties cannot give, so
  // those JSON Schema allows but the strict grammar would leave out are written too.
  std::optional<Seq> other_members(const ObjectRules& o, const std::string& where, int depth,
                                   bool needed) {
    std::vector<std::string> names;
    for (const auto& p : o.properties) names.push_back(p.first);
    std::vector<std::tuple<std::string, Conjunction, size_t>> patterns;
    for (size_t i = 0; i < o.open.size(); ++i)
      for (const auto& [p, c] : o.open[i].patterns) patterns.emplace_back(p, c, i);
    if (patterns.size() > 1)
      refuse(where, "more than one 'patternProperties' pattern at one place is not supported");
    if (patterns.size() == 1) {
      const auto& [p, schemas, owner] = patterns.front();
      // A member named by the pattern takes its schemas and every other rule's rest.
      Conjunction c = schemas;
      for (size_t i = 0; i < o.open.size(); ++i) {
        if (i == owner) continue;
        if (o.open[i].rest == Rest::kNone) return std::nullopt;
        if (o.open[i].rest == Rest::kSchema) c.add(o.open[i].additional);
      }
      // Members named by the pattern are written only where none could be a listed property's
      // name (a name twice would be a duplicate member).
      for (const std::string& name : names)
        if (reader_.pattern_found(p, name, Formats::kIgnored)) {
          if (needed)
            refuse(where, "'patternProperties' " + json(p).dump() + " matches the property " +
                              json(name).dump() +
                              ", and 'minProperties' needs members it names (not supported)");
          return std::nullopt;
        }
      if (o.property_names) return std::nullopt;
      const std::optional<Seq> v = value(c, depth + 1);
      if (!v) return std::nullopt;
      return member(quoted(regex(searched(p, ".*"), true)), *v);
    }
    Conjunction c;
    bool written = o.open.empty();
    for (const OpenRule& rule : o.open) {
      if (rule.rest == Rest::kNone) return std::nullopt;
      if (rule.rest == Rest::kSchema) {
        c.add(rule.additional);
        written = true;
      }
    }
    if (!written && !needed) return std::nullopt;
    const std::optional<Seq> v = value(c, depth + 1);
    if (!v) return std::nullopt;
    Seq key;
    if (o.property_names) {
      if (!names.empty()) return std::nullopt;  // free names and propertyNames: none written
      std::vector<Seq> keys;
      for (const Branch& b : writable(reader_.read(*o.property_names, depth + 1)))
        if (b.kind == Kind::kString)
          if (std::optional<Seq> s = branch_text(b, where + "/propertyNames", depth + 1))
            keys.push_back(std::move(*s));
      if (keys.empty()) return std::nullopt;
      key = one_of(std::move(keys), "name");
    } else if (names.empty()) {
      key = any_string();
    } else {
      // Plain characters only: an escape could spell a property's name.
      NameTrie trie;
      for (const std::string& name : names) trie.add(name);
      key = quoted(regex(trie.others(), true));
    }
    return member(key, *v);
  }

  std::optional<Seq> object_text(const ObjectRules& o, const std::string& where, int depth) {
    std::vector<std::pair<Seq, bool>> members;  // "key": value, and whether required
    for (const auto& [name, schemas] : o.properties) {
      const bool required = listed(o.required, name);
      const std::optional<Seq> v = value(schemas, depth + 1);
      if (!v) {
        if (required) return std::nullopt;
        continue;
      }
      members.emplace_back(member(literal(json(name).dump()), *v), required);
    }
    const int n = static_cast<int>(members.size());
    const int min = o.min_properties, max = o.max_properties;
    const std::optional<Seq> other = other_members(o, where, depth, min > n);
    // Two members of free names could be one name twice, which counts once.
    if (other && min - n >= 2)
      refuse(where, "'minProperties' " + std::to_string(min) +
                        " needs two or more members beyond the named properties, whose names "
                        "could repeat (not supported)");
    // members(i, k, first): the members from i on, k written so far (counted up to the bound
    // that matters), `first` when none is: a rule per state, made once. At least one member is
    // written (the empty object is container()'s own alternative).
    const int cap = max >= 0 ? max : min;
    std::map<std::tuple<int, int, bool>, std::optional<Seq>> made;
    const auto from = [&](auto&& self, int i, int k, bool first) -> std::optional<Seq> {
      const auto state = std::make_tuple(i, k, first);
      if (auto it = made.find(state); it != made.end()) return it->second;
      std::optional<Seq> out;
      if (i == n) {
        const int lo = std::max(min - k, first ? 1 : 0), hi = max < 0 ? -1 : max - k;
        if (lo == 0 && (!other || hi == 0)) {
          out = Seq{};
        } else if (other && lo <= 1 && hi != 0) {
          out = first ? list_of(*other, lo, hi)
                      : Seq{b_.repeat(comma_then(*other), lo, hi, "members")};
        }
      } else {
        std::vector<Seq> alternatives;
        if (max < 0 || k < max) {
          if (std::optional<Seq> next = self(self, i + 1, std::min(k + 1, cap), false)) {
            Seq s = first ? members[static_cast<size_t>(i)].first
                          : comma_then(members[static_cast<size_t>(i)].first);
            append(s, *next);
            alternatives.push_back(std::move(s));
          }
        }
        if (!members[static_cast<size_t>(i)].second)
          if (std::optional<Seq> next = self(self, i + 1, k, first))
            alternatives.push_back(std::move(*next));
        if (!alternatives.empty()) {
          const uint32_t r = b_.fresh_rule("members");
          for (Seq& alt : alternatives) b_.add_alternative(r, std::move(alt));
          out = Seq{GrammarBuilder::ref(r)};
        }
      }
      made.emplace(state, out);
      return out;
    };
    const bool may_be_empty = min == 0 && std::none_of(members.begin(), members.end(),
                                                       [](const auto& m) { return m.second; });
    const std::optional<Seq> inside = from(from, 0, 0, true);
    if (!inside && !may_be_empty) return std::nullopt;
    return container("{", inside, may_be_empty, "}");
  }

  const json& root_;
  JsonSchemaOptions o_;
  ShapeReader reader_;
  GrammarBuilder b_;
  std::map<std::string, std::optional<uint32_t>> rules_;  // by place; nullopt: none written
  std::set<uint32_t> done_, recursive_;  // rules made whole; rules referred to while being made
  std::map<std::string, GrammarBuilder::Symbol> regexes_;  // by text
  std::optional<GrammarBuilder::Symbol> ws_, char_, string_;
};

}  // namespace

Grammar compile_json_schema(const json& schema, const JsonSchemaOptions& options) {
  return Emitter(schema, options).compile();
}

Grammar json_object_grammar(const JsonSchemaOptions& options) {
  static const json kObject = {{"type", "object"}};
  return Emitter(kObject, options).compile();
}

}  // namespace tpllama::grammar
