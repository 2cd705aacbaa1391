// A JSON Schema read as the set of values it validates, every keyword of a schema holding at once:
// a union of branches, one kind of value each (null, boolean, integer, number, string, array,
// object) with that kind's constraints. allOf, $ref and a schema's own keywords intersect branch by
// branch (an enum filtered by its siblings, a type applied to each branch of an anyOf), anyOf
// unites, oneOf unites branches it can prove exclusive (refusing the rest by name). Sub-schemas
// (properties, items) stay unread until someone asks, as conjunctions of the schemas that hold
// there, so a recursive $ref is read once per place. The shapes are exact: what json_schema.cpp
// writes is a subset of them (it leaves out what JSON Schema allows but a strict grammar does not
// write), and the exclusivity of oneOf is proven on them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/number_range.h"
#include "grammar/schema_regex.h"

namespace tpllama::grammar {

using SchemaJson = nlohmann::ordered_json;

// The schemas that must all hold at one place of a value, each with where it is in the document.
// No schema: any value.
struct Conjunction {
  std::vector<std::pair<const SchemaJson*, std::string>> parts;

  void add(const Conjunction& more);  // each schema once
  // The place, for messages (its first schema's path).
  std::string where() const { return parts.empty() ? "#" : parts.front().second; }
  // Its identity: the schemas, in any order (a recursive place is one rule).
  std::string key() const;
};

enum class Kind : uint8_t { kNull, kBoolean, kInteger, kNumber, kString, kArray, kObject };
const char* kind_name(Kind kind);

// The items or members past those a schema names: none (false); any, but the grammar writes none
// (absent beside prefixItems or properties: JSON Schema allows them, a strict grammar does not
// write them, as OpenAI's strict mode and XGrammar's); or values of the given schemas, written.
enum class Rest : uint8_t { kNone, kUnwritten, kSchema };

struct StringRules {
  int min_length = 0;
  int max_length = -1;                // -1: no bound
  std::vector<std::string> patterns;  // as given: each is searched for (ECMA-262 reads them so)
  std::vector<std::string>
      formats;  // written to; never relied on (a validator may not assert them)
};

struct ArrayRules {
  std::vector<Conjunction> prefix;  // prefixItems
  Rest rest = Rest::kSchema;        // past the prefix
  Conjunction items;                // rest kSchema: the schemas of each item past the prefix
  int min_items = 0;
  int max_items = -1;
};

// One schema's rule for the members its properties do not name: those matching a pattern of
// patternProperties take its schemas; the others, `rest`.
struct OpenRule {
  std::vector<std::pair<std::string, Conjunction>> patterns;
  Rest rest = Rest::kSchema;
  Conjunction additional;
};

struct ObjectRules {
  // In the schemas' order; each name's schemas include the open rules' of every other schema.
  std::vector<std::pair<std::string, Conjunction>> properties;
  std::vector<std::string> required;  // each a name of `properties`
  std::vector<OpenRule> open;         // every schema's, all holding (none: any other member)
  std::optional<Conjunction> property_names;
  int min_properties = 0;
  int max_properties = -1;
};

struct Branch {
  Kind kind = Kind::kNull;
  // A type or a keyword of this kind asked for it. A schema without a type validates every kind
  // its keywords do not speak of; the grammar writes only the kinds asked for, where there are.
  bool named = false;
  std::optional<std::vector<SchemaJson>> values;  // enum or const: these values only
  RangeBound minimum, maximum;                    // integer, number
  bool not_integer = false;                       // number: only those with a fraction
  StringRules string;
  ArrayRules array;
  ObjectRules object;
};

using Shape = std::vector<Branch>;  // the union

struct ShapeLimits {
  int max_depth = 64;         // nested schemas (through $ref, once each)
  size_t max_enum = 4096;     // values of one enum
  int max_items = 1024;       // the largest count read (minItems, maxLength, maxProperties, ...)
  size_t max_branches = 256;  // of one place's union (allOf of anyOfs multiplies them)
  size_t max_places = 4096;   // places read
};

// How formats are taken where a value is tested: asserted (what is written, and enum values kept,
// must match them: python3-jsonschema with a format checker) or ignored (a proof that two schemas
// exclude each other must hold for a validator that ignores them too).
enum class Formats : uint8_t { kAsserted, kIgnored };

// Reads schemas into shapes; throws Error naming the keyword and its place when refused.
class ShapeReader {
 public:
  ShapeReader(const SchemaJson& root, const ShapeLimits& limits) : root_(root), limits_(limits) {}

  // The values every schema of c validates; empty when none does. Read once per place.
  const Shape& read(const Conjunction& c, int depth);
  // Whether some value satisfies every schema of c, or c is being read (a place within itself).
  bool maybe_inhabited(const Conjunction& c, int depth);
  // Whether the shape's values include v.
  bool accepts(const Shape& shape, const SchemaJson& v, Formats formats, int depth);
  // Whether no value is in both (false where that cannot be shown).
  bool disjoint(const Shape& a, const Shape& b, int depth);
  // The schemas an unnamed member `name` takes under the open rules; nullopt: it is not allowed.
  std::optional<Conjunction> open_member(const std::vector<OpenRule>& open,
                                         const std::string& name);
  // Whether a JSON Schema pattern is found in text (a search, as ECMA-262 and Python's re.search).
  bool pattern_found(const std::string& pattern, const std::string& text, Formats formats);

  const ShapeLimits& limits() const { return limits_; }
  // A value of an enum or const left out only because its format's check (format_table) refused
  // it, the first one: what a refusal of the schema then names.
  const std::optional<SchemaJson>& format_refused() const { return format_refused_; }

 private:
  Shape read_one(const SchemaJson& schema, const std::string& where, int depth,
                 std::vector<std::string>& refs);
  Shape typed(const SchemaJson& schema, const std::string& where, int depth);
  Shape intersect(const Shape& a, const Shape& b, const std::string& where, int depth);
  std::optional<Branch> merge(const Branch& a, const Branch& b, int depth);
  std::optional<Branch> merge_values(const Branch& with, const Branch& other, int depth);
  std::optional<ArrayRules> merge_arrays(const ArrayRules& a, const ArrayRules& b);
  std::optional<ObjectRules> merge_objects(const ObjectRules& a, const ObjectRules& b, int depth);
  bool settle_object(ObjectRules& o, int depth);
  Shape exclusive_union(const std::vector<Shape>& alternatives, const std::string& where,
                        int depth);
  bool disjoint(const Branch& a, const Branch& b, int depth);
  Branch written_closed(const Branch& b, int depth);
  bool accepts(const Branch& b, const SchemaJson& v, Formats formats, int depth);
  bool full_match(const std::string& regex, const std::string& text);
  const Grammar& compiled(const std::string& regex);
  // Whether some string's length fits the rules' bounds and each pattern's and format's lengths.
  bool lengths_possible(const StringRules& r);

  const SchemaJson& root_;
  ShapeLimits limits_;
  std::map<std::string, Shape> shapes_;     // by place
  std::map<std::string, Grammar> regexes_;  // compiled once, by text
  std::set<std::string> reading_;           // places being read
  std::optional<SchemaJson> format_refused_;
};

// Every keyword the reader takes (beside the annotations), for the README's list and its test.
const std::vector<std::string>& supported_schema_keywords();
const std::vector<std::string>& schema_annotations();

}  // namespace tpllama::grammar
