#!/usr/bin/env python3
"""Seeded JSON Schema fuzzer for structured outputs, checked by python3-jsonschema.

Generates random JSON Schemas (random.Random(seed)) over the keywords src/grammar/json_schema.h
lists and their combinations: type (one or a list), enum and const beside other keywords, number
and integer bounds (exclusive, negative, fractional, wide and narrow), strings with lengths,
patterns (anchored or not) and formats, arrays (items, prefixItems, items: false, counts),
objects (properties, required, additionalProperties false / absent / a schema, one
patternProperties pattern, propertyNames, member counts), anyOf, oneOf (exclusive ones, and
overlapping ones the tool must refuse), allOf of mergeable schemas, $defs / definitions with $ref
(recursion included), nested up to depth 3, and a few schemas no value satisfies. Each schema is
asked for twice (two seeds, or one request of "n": 2) at temperature 1, through guided_json or
response_format, in one `tpllama run` batch per model: stories260K (SentencePiece, 512 tokens) and
a random model with the Llama 3 vocabulary (byte-level BPE, 128,256 tokens).

Every record is checked:
  - "stop": json.loads (strict: no NaN/Infinity) and Draft202012Validator with a format checker:
    jsonschema's own checks (but "time", which 4.26 refuses for every time) and our RFC 3339 /
    RFC 4122 patterns with calendar dates (so "oneOf" counts as jsonschema counts it);
  - "length": only where max_tokens cut it (completion_tokens == max_tokens);
  - "error": the schema was REFUSED (its message is recorded). A refusal saying "no value
    satisfies" is right only when no value of a pool validates (generic values, every enum and
    const value of the schema, values built from the schema); else it is a wrongful claim.

Exit status 1 when a "stop" record is invalid, an unsatisfiable claim is wrongful, or the refused
schemas (less the rightly refused unsatisfiable ones) are 20% or more of those generated on a
model. The defaults (500 schemas on stories260K, the first 150 of them on the Llama 3 vocabulary)
take about a minute on 2 cores. `--schema FILE` (or JSON text) asks for one schema instead, a
reproducer; with `--minimize wrongful|invalid` it is shrunk while the failure still shows.
Usage: schema_fuzz.py --tpllama BIN --models DIR --llama3-tokenizer FILE --work DIR [--seed S]
       [--schemas N] [--llama3-schemas N (0: stories260K only)]
"""
import argparse
import collections
import copy
import json
import math
import os
import random
import re
import sys

import oracle_run

try:
    import jsonschema
except ImportError:
    sys.exit("python3-jsonschema is missing: apt-get install python3-jsonschema "
             "(scripts/setup.sh installs it)")

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom", "One day"]
MAX_TOKENS = 200  # --max-tokens: the default

# ---- Formats: jsonschema's checks and ours, both must hold --------------------------------------

def format_checker():
    """jsonschema's checkers (all but "time") and ours: a string must pass both."""
    checker = jsonschema.FormatChecker()
    builtin = {name: checker.checkers[name] for name in oracle_run.FORMATS
               if name in checker.checkers and name != "time"}
    for name in oracle_run.FORMATS:
        def check(value, name=name):
            if not isinstance(value, str):
                return True
            if not oracle_run.format_ok(name, value):
                return False
            if name in builtin:
                func, raises = builtin[name]
                try:
                    return bool(func(value))
                except raises:
                    return False
            return True
        checker.checkers[name] = (check, ())
    return checker


FORMAT_CHECKER = format_checker()


def validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def parse(text):
    """The value, and the keys some object of it repeats (json.loads keeps the last)."""
    repeated = []

    def pairs(items):
        seen = set()
        for k, _ in items:
            if k in seen:
                repeated.append(k)
            seen.add(k)
        return dict(items)
    return json.loads(text, object_pairs_hook=pairs, parse_constant=_no_constant), repeated


def errors_of(schema, value):
    try:
        return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in validator(schema).iter_errors(value)]
    except RecursionError:
        return ["jsonschema: recursion"]


# ---- The generator ------------------------------------------------------------------------------

# (pattern, strings it finds, its character for lengths when it is one quantified class, or None)
PATTERNS = [
    (r"^[a-z]+$", ["abc", "z", "hello"], "a"),
    (r"^[A-Z]{2,4}-\d{2}$", ["AB-12", "ABCD-99"], None),
    (r"^[0-9]{5}$", ["12345"], None),
    (r"^[a-z0-9_]{3,12}$", ["abc_1", "user_name"], "a"),
    (r"^\d+$", ["123", "7"], "1"),
    (r"^[A-Z][a-z]*$", ["Tom", "A"], None),
    (r"^\w+$", ["abc_9"], "a"),
    (r"^\S+$", ["a-b", "x"], "a"),
    (r"^[^\s]+$", ["a-b"], "a"),
    (r"^\D*$", ["abc", ""], "a"),
    (r"^\D+$", ["abc"], "a"),
    (r"^\W+$", ["-+", "@"], "-"),
    (r"^(red|green|blue)$", ["red", "blue"], None),
    (r"^#[0-9a-fA-F]{6}$", ["#a0B1c2"], None),
    (r"^v\d+\.\d+\.\d+$", ["v1.2.3"], None),
    (r"^\+?[0-9 ]{7,15}$", ["+1 234 5678"], None),
    (r"^.{1,5}$", ["abc", "x"], "a"),
    (r"^[a-f0-9]{8}$", ["deadbeef"], None),
    (r"[0-9]", ["a1b", "5"], None),
    (r"abc", ["xabcx", "abc"], None),
    (r"^ab", ["abz", "ab"], None),
    (r"z$", ["xyz", "z"], None),
    (r"-", ["a-b"], None),
    (r"^[^@]+@[^@]+$", ["a@b"], None),
    (r"\s", ["a b"], None),
]
FORMATS = ["date", "date-time", "uuid", "email", "time"]
FORMAT_VALUES = {
    "date": ["2024-01-15", "1999-12-31", "2024-02-29", "2023-02-29", "2024-02-30", "2024-13-01",
             "2024-1-5"],
    "date-time": ["2024-01-15T10:20:30Z", "2024-01-15T10:20:30.5+02:00", "2024-01-15t10:20:30z",
                  "2024-01-15 10:20:30Z", "2023-02-30T00:00:00Z", "2024-01-15T24:00:00Z"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
             "123e4567e89b12d3a456426614174000", "not-a-uuid"],
    "email": ["a@b.co", "john.doe@example.com", "a@b", "x y@z.com", "@", "plain"],
    "time": ["10:20:30Z", "23:59:60Z", "10:20:30+05:30", "10:20", "25:00:00Z"],
}
NAMES = ["name", "id", "age", "kind", "tags", "score", "items", "city", "note", "x", "y",
         "value", "type", "label", "count", "ok", "when", "email", "meta", "size"]
INTS = [-1000000, -1000, -100, -10, -5, -1, 0, 0, 1, 1, 2, 3, 9, 10, 42, 99, 100, 255, 1000,
        65535, 2 ** 31 - 1, 10 ** 9, 10 ** 15, 10 ** 18]
FRACS = [-2.5, -0.75, -0.1, 0.001, 0.1, 0.2, 0.25, 0.3, 0.5, 1.5, 2.75, 9.99, 99.5, 1e-05,
         123.456, -1234.5678]
DELTAS = [0, 0.001, 0.1, 0.5, 1, 1, 2, 5, 10, 100, 1000, 10 ** 6]
STRINGS = ["red", "green", "blue", "a", "b", "", "yes", "no", "N/A", "hello world", "ab", "x1",
           "ÄÖ", "caf\u00e9", "12345", "2024-01-15", "a@b.co"]
MIXED = [1, 2, 1.5, 0, -3, "1", "one", True, False, None, [], [1, 2], {}, {"a": 1}, "red", 10,
         1.0, "x"]
LEAF_TYPES = ["string", "integer", "number", "boolean", "null"]
ALL_TYPES = LEAF_TYPES + ["array", "object"]


def num(x):
    """A bound as JSON writes it: whole floats as integers, others rounded to 6 decimals."""
    if isinstance(x, float):
        x = round(x, 6)
        if x == int(x) and abs(x) < 1e15:
            return int(x)
    return x


class Generator:
    def __init__(self, rng):
        self.r = rng

    def w(self, options):
        """One of (value, weight) pairs."""
        total = sum(wt for _, wt in options)
        x = self.r.random() * total
        for v, wt in options:
            x -= wt
            if x < 0:
                return v
        return options[-1][0]

    def chance(self, p):
        return self.r.random() < p

    # -- the root
    def schema(self):
        """(schema, tags): tags say what made it, for the report."""
        self.tags = set()
        self.defs = {}
        self.defs_key = "$defs"
        x = self.r.random()
        if x < 0.06:
            s = self.unsatisfiable(0)
        elif x < 0.13:
            s = self.recursive()
        else:
            if self.chance(0.15):
                self.make_defs()
            s = self.w([(lambda: self.object(0), 6), (lambda: self.array(0), 1),
                        (lambda: self.any(0), 3)])()
        if self.defs:
            s = dict(s)
            s[self.defs_key] = self.defs
        return s, sorted(self.tags)

    def any(self, d):
        if d >= 3:
            return self.leaf(d)
        options = [(self.leaf, 6), (self.object, 2.5 if d < 2 else 1), (self.array, 2),
                   (self.any_of, 1), (self.one_of, 1.3), (self.all_of, 1), (self.type_list, 0.7),
                   (self.enum_const, 1)]
        if self.defs:
            options.append((self.ref, 1.5))
        if d > 0:
            options.append((lambda d: self.unsatisfiable(d) if self.chance(0.1)
                            else self.leaf(d), 0.2))
        return self.w(options)(d)

    def leaf(self, d):
        return self.w([(self.integer, 2), (self.number, 1.5), (self.string, 3.5),
                       (lambda d: {"type": "boolean"}, 0.7), (lambda d: {"type": "null"}, 0.3),
                       (self.enum_const, 1)])(d)

    # -- numbers
    def bounds(self, integer):
        r = self.r
        s = {}
        mode = self.w([("none", 1.5), ("min", 1.5), ("max", 1), ("both", 3), ("frac", 1.5),
                       ("narrow", 1.5), ("wide", 0.7)])
        self.tags.add("num-" + mode)

        def pick():
            return r.choice(FRACS) if r.random() < (0.2 if integer else 0.5) \
                else r.choice(INTS[:20])
        lo = hi = None
        if mode == "min":
            lo = pick()
        elif mode == "max":
            hi = pick()
        elif mode == "both":
            lo = pick()
            hi = num(lo + r.choice(DELTAS[3:10]))
        elif mode == "frac":
            lo = r.choice(FRACS)
            hi = num(lo + r.choice([1.5, 2.5, 10] if integer and r.random() < 0.8
                                   else [0.001, 0.01, 0.5, 1, 2.5, 10]))
        elif mode == "narrow":
            lo = pick()
            hi = num(lo + r.choice([1, 2] if integer and r.random() < 0.8 else DELTAS[:5]))
        elif mode == "wide":
            lo = r.choice([-(10 ** 15), -(10 ** 9), -(2 ** 31), 0, -1e9])
            hi = r.choice([10 ** 9, 10 ** 15, 10 ** 18, 2 ** 53, 1e12])
        if lo is not None:
            s["exclusiveMinimum" if r.random() < 0.3 else "minimum"] = num(lo)
        if hi is not None:
            s["exclusiveMaximum" if r.random() < 0.3 else "maximum"] = num(hi)
        if lo is not None and hi is not None and r.random() < 0.04:  # crossed: no value
            self.tags.add("num-crossed")
            lo_key = "minimum" if "minimum" in s else "exclusiveMinimum"
            hi_key = "maximum" if "maximum" in s else "exclusiveMaximum"
            s[lo_key], s[hi_key] = s[hi_key], s[lo_key]
        return s

    def integer(self, d):
        s = {"type": "integer"}
        s.update(self.bounds(True))
        return s

    def number(self, d):
        s = {"type": "number"}
        s.update(self.bounds(False))
        return s

    # -- strings
    def lengths(self):
        r = self.r
        s = {}
        if r.random() < 0.4:
            s["minLength"] = r.choice([0, 1, 1, 2, 3, 5])
        if r.random() < 0.85 or not s:
            s["maxLength"] = max(s.get("minLength", 0), r.choice([0, 1, 3, 5, 8, 12, 16]))
            if r.random() < 0.03 and s.get("minLength", 0) > 0:  # crossed
                s["maxLength"] = s["minLength"] - 1
        return s

    def string(self, d):
        r = self.r
        s = {"type": "string"}
        mode = self.w([("lengths", 3), ("pattern", 2.5), ("format", 1.5),
                       ("pattern+lengths", 1), ("format+lengths", 0.3), ("free", 0.4),
                       ("enum+keyword", 0.3)])
        self.tags.add("str-" + mode)
        if mode == "lengths":
            s.update(self.lengths())
        elif mode == "pattern":
            s["pattern"] = r.choice(PATTERNS)[0]
            if not s["pattern"].endswith("$") and r.random() < 0.7:
                s["maxLength"] = r.choice([4, 8, 12])  # an unanchored pattern with a bound
                single = [p for p in PATTERNS if p[2] is not None]
                s["pattern"] = r.choice(single)[0]
        elif mode == "format":
            s["format"] = r.choice(FORMATS)
        elif mode == "pattern+lengths":
            if r.random() < 0.75:
                s["pattern"] = r.choice([p for p in PATTERNS if p[2] is not None])[0]
                s.update(self.lengths())
            else:  # a pattern whose span may or may not imply the lengths
                s["pattern"] = r.choice([r"^[A-Z]{2,4}-\d{2}$", r"^[0-9]{5}$",
                                         r"^#[0-9a-fA-F]{6}$", r"^[a-f0-9]{8}$"])
                s[r.choice(["minLength", "maxLength"])] = r.choice([3, 5, 7, 8, 10])
        elif mode == "format+lengths":
            s.update(r.choice([{"format": "email", "maxLength": r.choice([64, 254])},
                               {"format": "email", "minLength": 6},
                               {"format": "uuid", "minLength": 36, "maxLength": 36},
                               {"format": "date", "maxLength": 10},
                               {"format": "date", "minLength": 10, "maxLength": 10},
                               {"format": "date-time", "maxLength": r.choice([20, 32, 64])},
                               {"format": "time", "maxLength": 8}]))
        elif mode == "enum+keyword":
            fmt = r.choice(FORMATS)
            if r.random() < 0.5:
                s["format"] = fmt
                s["enum"] = r.sample(FORMAT_VALUES[fmt], min(3, len(FORMAT_VALUES[fmt])))
            else:
                p = r.choice(PATTERNS)
                s["pattern"] = p[0]
                s["enum"] = r.sample(STRINGS, 3) + [r.choice(p[1])]
        return s

    # -- enum and const
    def enum_const(self, d):
        r = self.r
        mode = self.w([("enum-str", 3), ("enum-mixed", 1.5), ("const", 1.5), ("typed-enum", 1.5),
                       ("const-compound", 0.5), ("enum-bounded", 1)])
        self.tags.add(mode)
        if mode == "enum-str":
            return {"enum": r.sample(STRINGS, r.randint(1, 4))}
        if mode == "enum-mixed":
            return {"enum": r.sample(MIXED, r.randint(2, 5))}
        if mode == "const":
            return {"const": r.choice(STRINGS + MIXED)}
        if mode == "typed-enum":
            t = r.choice(LEAF_TYPES[:4] if r.random() < 0.8 else [["string", "null"],
                                                                 ["integer", "string"]])
            s = {"type": t}
            vals = r.sample(MIXED + STRINGS, r.randint(2, 5))
            if r.random() < 0.85:  # mostly some value of the type among them
                ts = t if isinstance(t, list) else [t]
                fits = [v for v in MIXED + STRINGS + [3.25, -2]
                        if any(self.kind_fits(v, one) for one in ts)]
                vals.insert(r.randint(0, len(vals)), r.choice(fits))
            s["enum"] = vals
            if r.random() < 0.3:
                del s["enum"]
                s["const"] = r.choice(vals)
            return s
        if mode == "const-compound":
            return {"const": r.choice([{"a": 1, "b": [True, None]}, [1, "two", {"x": 3.5}],
                                       {"k": "v"}, [[]]])}
        # enum beside bounds, lengths or a pattern
        vals = r.sample(MIXED + STRINGS + [5, 7, 42, -1, 100], r.randint(3, 6))
        s = {"enum": vals}
        extra = r.choice([{"minimum": 2}, {"exclusiveMaximum": 10}, {"maxLength": 2},
                          {"minLength": 3}, {"pattern": "^[a-z]+$"}, {"type": "number",
                                                                       "maximum": 5}])
        s.update(extra)
        return s

    @staticmethod
    def kind_fits(v, t):
        if t == "null":
            return v is None
        if t == "boolean":
            return isinstance(v, bool)
        if t == "integer":
            return isinstance(v, (int, float)) and not isinstance(v, bool) and v == int(v)
        if t == "number":
            return isinstance(v, (int, float)) and not isinstance(v, bool)
        return t == "string" and isinstance(v, str)

    # -- arrays
    def array(self, d):
        r = self.r
        s = {"type": "array"}
        mode = self.w([("items", 6), ("prefix", 2), ("prefix-closed", 1), ("bare", 0.4)])
        self.tags.add("arr-" + mode)
        if mode == "items":
            s["items"] = self.any(d + 1)
        elif mode in ("prefix", "prefix-closed"):
            s["prefixItems"] = [self.leaf(d + 1) if r.random() < 0.7 else self.any(d + 1)
                                for _ in range(r.randint(1, 3))]
            if mode == "prefix-closed":
                s["items"] = False
            elif r.random() < 0.5:
                s["items"] = self.leaf(d + 1)
        if r.random() < 0.4:
            s["minItems"] = r.choice([0, 1, 1, 2, 3])
        if r.random() < 0.85 or mode in ("items", "bare"):
            s["maxItems"] = max(s.get("minItems", 0), r.choice([1, 2, 3, 3, 4]))
            if r.random() < 0.03 and s.get("minItems", 0) > 0:
                s["maxItems"] = s["minItems"] - 1
        if r.random() < 0.05:
            s["uniqueItems"] = False
        if r.random() < 0.1:
            del s["type"]
        return s

    # -- objects
    def object(self, d):
        r = self.r
        if r.random() < 0.1:
            return self.map(d)
        n = r.randint(1, [4, 3, 2, 1][min(d, 3)])
        names = r.sample(NAMES, n)
        props = {name: self.any(d + 1) for name in names}
        s = {"type": "object", "properties": props}
        req = [nm for nm in names if r.random() < 0.6]
        if req:
            s["required"] = req
        ap = self.w([("absent", 5), ("false", 3), ("schema", 1.5)])
        self.tags.add("obj-ap-" + ap)
        if ap == "false":
            s["additionalProperties"] = False
        elif ap == "schema":
            s["additionalProperties"] = self.leaf(d + 1)
            s["maxProperties"] = n + r.choice([0, 1, 2])
        if r.random() < 0.12:
            self.tags.add("obj-patternProperties")
            pat = r.choice(["^x_", "^[0-9]+$", "_id$", "^meta\\."])
            s["patternProperties"] = {pat: self.leaf(d + 1)}
            if "maxProperties" not in s:
                s["maxProperties"] = n + r.choice([0, 1, 2])
            if r.random() < 0.15:  # a property the pattern matches too
                matched = {"^x_": "x_a", "^[0-9]+$": "9", "_id$": "user_id", "^meta\\.": "meta.a"}
                s["properties"][matched[pat]] = {"type": "string", "maxLength": 4}
        if r.random() < 0.08:
            self.tags.add("obj-propertyNames")
            s["propertyNames"] = r.choice([{"pattern": "^[a-z_]+$"}, {"maxLength": 4},
                                           {"minLength": 2}, {"enum": names + ["zz"]}])
        if r.random() < 0.15:
            self.tags.add("obj-counts")
            s["minProperties"] = r.randint(0, n)
            if r.random() < 0.7:
                s["maxProperties"] = r.randint(max(s["minProperties"], len(req)) - (
                    1 if r.random() < 0.05 else 0), n + 1)
        if r.random() < 0.08:
            del s["type"]
        return s

    def map(self, d):
        r = self.r
        self.tags.add("obj-map")
        s = {"type": "object", "additionalProperties": self.leaf(d + 1),
             "maxProperties": r.choice([1, 2, 3])}
        if r.random() < 0.3:
            s["propertyNames"] = r.choice([{"pattern": "^[a-z]+$"}, {"maxLength": 6},
                                           {"enum": ["a", "b", "c"]}, {"format": "date"}])
        if r.random() < 0.3:
            s["minProperties"] = r.choice([0, 1])
        if r.random() < 0.1:
            s = {"type": "object", "patternProperties": {"^[a-z]{1,3}$": self.leaf(d + 1)},
                 "additionalProperties": False, "maxProperties": 2}
        return s

    # -- combinators
    def any_of(self, d):
        r = self.r
        mode = self.w([("plain", 3), ("nullable", 2), ("sibling", 1)])
        self.tags.add("anyOf-" + mode)
        if mode == "plain":
            return {"anyOf": [self.any(d + 1) for _ in range(r.randint(2, 3))]}
        if mode == "nullable":
            return {"anyOf": [self.any(d + 1), {"type": "null"}]}
        return r.choice([
            {"type": "string", "anyOf": [{"maxLength": 3}, {"pattern": "^[0-9]+$"}]},
            {"type": "integer", "anyOf": [{"maximum": -5}, {"minimum": 5, "maximum": 50}]},
            {"type": ["string", "integer"], "anyOf": [{"minLength": 2, "maxLength": 4},
                                                      {"minimum": 0}]},
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string",
                                                                           "maxLength": 3}},
             "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
            {"anyOf": [{"type": "string", "format": "date"}, {"type": "string",
                                                              "format": "date-time"}]},
        ])

    def one_of(self, d):
        r = self.r
        mode = self.w([("types", 2), ("discriminator", 2), ("ranges", 1.5), ("values", 1),
                       ("lengths", 0.7), ("required", 1), ("int-number", 0.7),
                       ("overlapping", 1.2)])
        self.tags.add("oneOf-" + mode)
        if mode == "types":
            types = r.sample(LEAF_TYPES, r.randint(2, 3))
            alts = []
            for t in types:
                a = {"string": self.string, "integer": self.integer, "number": self.number,
                     "boolean": lambda d: {"type": "boolean"},
                     "null": lambda d: {"type": "null"}}[t](d + 1)
                alts.append(a)
            if r.random() < 0.3:
                alts.append(self.object(d + 1) if r.random() < 0.5 else self.array(d + 1))
            return {"oneOf": alts}
        if mode == "discriminator":
            key = r.choice(["kind", "type"])
            alts = []
            for tag in r.sample(["circle", "square", "text", "image", "a", "b"],
                                r.randint(2, 3)):
                extra = r.sample([nm for nm in NAMES if nm != key], r.randint(1, 2))
                props = {key: {"const": tag} if r.random() < 0.7 else {"enum": [tag]}}
                for nm in extra:
                    props[nm] = self.leaf(d + 2)
                alt = {"type": "object", "properties": props,
                       "required": [key] + [nm for nm in extra if r.random() < 0.5]}
                if r.random() < 0.5:
                    alt["additionalProperties"] = False
                alts.append(alt)
            return {"oneOf": alts}
        if mode == "ranges":
            t = r.choice(["integer", "number"])
            cut = r.choice([0, 10, -1, 0.5, 100])
            low = {"type": t, "exclusiveMaximum" if t == "number" else "maximum":
                   num(cut if t == "number" else math.floor(cut) - (0 if cut != int(cut)
                                                                     else 1))}
            high = {"type": t, "minimum": num(cut if t == "number" else math.ceil(cut))}
            if r.random() < 0.5:
                low["minimum"] = num(cut - 50)
                high["maximum"] = num(cut + r.choice([1, 50, 0.5]))
            return {"oneOf": [low, high]}
        if mode == "values":
            vals = r.sample(STRINGS + [1, 2, 3, None, True], 4)
            return r.choice([{"oneOf": [{"const": vals[0]}, {"const": vals[1]}]},
                             {"oneOf": [{"enum": vals[:2]}, {"enum": vals[2:]}]},
                             {"oneOf": [{"enum": vals[:3]}, {"enum": vals[2:]}]}])
        if mode == "lengths":
            k = r.choice([2, 3, 5])
            return {"oneOf": [{"type": "string", "maxLength": k},
                              {"type": "string", "minLength": k + 1, "maxLength": k + 4}]}
        if mode == "required":
            a, b, c = r.sample(NAMES, 3)
            return r.choice([
                {"oneOf": [{"type": "object", "properties": {a: {"type": "integer"}},
                            "required": [a], "additionalProperties": False},
                           {"type": "object", "properties": {b: {"type": "string",
                                                                 "maxLength": 4}},
                            "required": [b], "additionalProperties": False}]},
                {"oneOf": [{"type": "object", "properties": {a: {"type": "integer"}},
                            "required": [a]},
                           {"type": "object", "properties": {b: {"type": "boolean"}},
                            "required": [b]}]},
                {"oneOf": [{"type": "object", "properties": {a: {"type": "integer"},
                                                             b: {"type": "boolean"}},
                            "required": [a]},
                           {"type": "object", "properties": {b: {"type": "boolean"},
                                                             c: {"type": "null"}},
                            "required": [b]}]},
                {"type": "object", "properties": {a: {"type": "integer"}, b: {"type": "string",
                                                                              "maxLength": 3}},
                 "oneOf": [{"required": [a]}, {"required": [b]}]},
            ])
        if mode == "int-number":
            lo = r.choice([None, 0, -2.5, 1])
            n = {"type": "number"}
            i = {"type": "integer"}
            if lo is not None:
                n["minimum"] = lo
                n["maximum"] = num(lo + r.choice([1, 3.5, 10]))
            if r.random() < 0.5:
                i["minimum"] = 0
                i["maximum"] = 5
            return {"oneOf": [n, i] if r.random() < 0.5 else [i, n]}
        # overlapping alternatives: the tool must refuse them (or prove them apart)
        return r.choice([
            {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 5}]},
            {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]},
            {"oneOf": [{"type": "number"}, {"type": "number", "minimum": 0}]},
            {"oneOf": [{"type": "string", "format": "date"}, {"type": "string",
                                                              "pattern": "^[0-9-]+$"}]},
            {"oneOf": [{"type": "string", "format": "uuid"}, {"type": "string",
                                                              "maxLength": 10}]},
            {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                       {"type": "object", "properties": {"b": {"type": "integer"}}}]},
            {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 10},
                       {"type": "integer", "minimum": 10, "maximum": 20}]},
            {"oneOf": [{"type": "number", "maximum": 1}, {"type": "number",
                                                          "exclusiveMinimum": 0.5}]},
            {"oneOf": [{"enum": ["a", "b"]}, {"type": "string", "maxLength": 1}]},
            {"oneOf": [{"type": "array", "maxItems": 2}, {"type": "array", "minItems": 1,
                                                          "maxItems": 3}]},
        ])

    def all_of(self, d):
        r = self.r
        mode = self.w([("object", 3), ("number", 1.5), ("string", 1.5), ("enum", 1),
                       ("ref", 1 if self.defs else 0), ("anyOf", 1), ("closed", 0.7),
                       ("three", 1)])
        self.tags.add("allOf-" + mode)
        if mode == "object":
            names = r.sample(NAMES, r.randint(2, 4))
            k = r.randint(1, len(names) - 1)
            p1 = {nm: self.leaf(d + 1) for nm in names[:k]}
            p2 = {nm: self.leaf(d + 1) for nm in names[k:]}
            a = {"type": "object", "properties": p1, "required": names[:1]}
            b = {"properties": p2}
            if r.random() < 0.6:
                b["required"] = [names[-1]]
            if r.random() < 0.3:  # a part constraining a property the other names
                b["properties"] = dict(p2, **{names[0]: self.leaf(d + 1)})
            return {"allOf": [a, b]}
        if mode == "number":
            t = r.choice(["integer", "number"])
            return {"allOf": [{"type": t}, self.bounds(t == "integer") or {"minimum": 0},
                              self.bounds(t == "integer") or {"maximum": 100}]}
        if mode == "string":
            p = r.choice([x for x in PATTERNS if x[2] is not None])[0]
            return {"allOf": [{"type": "string"}, {"maxLength": r.choice([3, 6, 10])},
                              r.choice([{"pattern": p}, {"minLength": 1}])]}
        if mode == "enum":
            vals = r.sample(STRINGS[:10] + [1, 2, 3], 6)
            return {"allOf": [{"enum": vals[:4]}, {"enum": vals[2:]}]}
        if mode == "ref":
            name = r.choice(list(self.defs))
            extra = r.choice([{"description": "more"}, {"title": "t"},
                              {"type": r.choice(["object", "string", "number"])}])
            return {"allOf": [{"$ref": f"#/{self.defs_key}/{name}"}, extra]}
        if mode == "anyOf":
            return {"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string",
                                                                "maxLength": 4}]},
                              {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0,
                                                              "maximum": 9}]}]}
        if mode == "closed":  # additionalProperties false in one part: the other's names fall
            a, b = r.sample(NAMES, 2)
            s = {"allOf": [{"type": "object", "properties": {a: self.leaf(d + 1)},
                            "additionalProperties": False},
                           {"properties": {b: self.leaf(d + 1)}}]}
            if r.random() < 0.5:
                s["allOf"][1]["required"] = [b]  # b is not allowed: no value
            return s
        t = r.choice(["integer", "string", "number"])
        parts = [{"type": t}] + [self.bounds(t == "integer") if t != "string" else
                                 self.lengths() for _ in range(2)]
        return {"allOf": parts}

    def type_list(self, d):
        r = self.r
        types = r.sample(ALL_TYPES, r.randint(2, 3))
        s = {"type": types}
        self.tags.add("type-list")
        for t in types:
            if t in ("integer", "number"):
                s.update(self.bounds(t == "integer"))
            elif t == "string":
                s.update(self.lengths())
            elif t == "array":
                s["items"] = self.leaf(d + 1)
                s["maxItems"] = 3
            elif t == "object":
                s["properties"] = {r.choice(NAMES): self.leaf(d + 1)}
                s["additionalProperties"] = False
        return s

    # -- $defs and $ref
    def make_defs(self):
        r = self.r
        self.defs_key = "$defs" if r.random() < 0.8 else "definitions"
        self.tags.add("defs")
        for name in r.sample(["address", "code", "amount", "status", "point"], r.randint(1, 2)):
            self.defs[name] = {"address": lambda: self.object(2), "code": lambda: self.string(2),
                               "amount": lambda: self.number(2),
                               "status": lambda: self.enum_const(2),
                               "point": lambda: {"type": "array", "prefixItems": [
                                   {"type": "number"}, {"type": "number"}], "items": False,
                                   "minItems": 2}}[name]()

    def ref(self, d):
        r = self.r
        name = r.choice(list(self.defs))
        s = {"$ref": f"#/{self.defs_key}/{name}"}
        if r.random() < 0.2:
            s["description"] = "see " + name
        if r.random() < 0.15:  # a sibling keyword that constrains (2020-12 applies both)
            s["type"] = r.choice(["object", "string", "number", "array"])
        self.tags.add("ref")
        return s

    def recursive(self):
        r = self.r
        mode = r.choice(["tree", "list", "root", "expr", "definitions"])
        self.tags.add("recursive-" + mode)
        leaf = self.leaf(2)
        if mode == "tree":
            return {"$defs": {"node": {
                "type": "object",
                "properties": {"value": leaf,
                               "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                            "maxItems": 2}},
                "required": ["value"] + (["children"] if r.random() < 0.3 else []),
                "additionalProperties": {"type": "null"} if r.random() < 0.5 else False}},
                "$ref": "#/$defs/node"}
        if mode == "list":
            return {"$defs": {"node": {
                "type": "object",
                "properties": {"v": leaf, "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                             {"type": "null"}]}},
                "required": ["v", "next"]}}, "$ref": "#/$defs/node"}
        if mode == "root":
            return {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                                     "sub": {"$ref": "#"}},
                    "required": ["name"], "additionalProperties": False}
        if mode == "expr":
            return {"$defs": {"expr": {"oneOf": [
                {"type": "integer", "minimum": 0, "maximum": 99},
                {"type": "object", "properties": {
                    "op": {"enum": ["+", "-", "*"]},
                    "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}, "minItems": 2,
                             "maxItems": 2}},
                 "required": ["op", "args"], "additionalProperties": False}]}},
                "$ref": "#/$defs/expr"}
        return {"definitions": {"cat": {
            "type": "object",
            "properties": {"label": leaf, "parent": {"$ref": "#/definitions/cat"}},
            "required": ["label"]}},
            "type": "object", "properties": {"root": {"$ref": "#/definitions/cat"}},
            "required": ["root"]}

    # -- no value satisfies these (or a part of them)
    def unsatisfiable(self, d):
        r = self.r
        self.tags.add("unsat-template")
        s = r.choice([
            {"type": "string", "enum": [1, 2]},
            {"type": "integer", "minimum": 5, "maximum": 3},
            {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3},
            {"type": "integer", "minimum": 2.2, "maximum": 2.8},
            {"type": "number", "minimum": 1, "exclusiveMaximum": 1},
            {"type": "string", "minLength": 5, "maxLength": 2},
            {"type": "object", "properties": {"a": False}, "required": ["a"]},
            {"allOf": [{"type": "string"}, {"type": "integer"}]},
            {"type": "array", "prefixItems": [{"type": "integer"}], "items": False,
             "minItems": 2},
            {"type": "object", "required": ["a"], "additionalProperties": False},
            {"const": "abc", "pattern": "^[0-9]+$"},
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "required": ["a", "b"], "maxProperties": 1},
            {"oneOf": [{"const": 1}, {"const": 1}]},
            {"enum": ["a", "b"], "minLength": 3},
            {"type": "string", "format": "date", "enum": ["2024-13-01", "tomorrow"]},
            {"type": "object", "propertyNames": {"maxLength": 2}, "required": ["name"]},
            {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 1},
             "minItems": 1},
            {"type": "string", "pattern": "^[a-z]+$", "maxLength": 0},
            {"type": ["integer", "null"], "const": "x"},
        ])
        s = copy.deepcopy(s)
        if d == 0 and r.random() < 0.5:  # inside a required property
            s = {"type": "object", "properties": {"ok": {"type": "boolean"}, "bad": s},
                 "required": ["ok", "bad"]}
        return s


# ---- Candidate values: does any value validate a schema called unsatisfiable? ------------------

GENERIC = [None, True, False, 0, 1, -1, 2, 7, 100, -100, 0.5, -2.5, 1.5, 3.14, "", "a", "abc",
           "A", "hello world", "2024-01-15", "2024-01-15T10:20:30Z", "10:20:30Z",
           "123e4567-e89b-12d3-a456-426614174000", "a@b.co", [], [1], ["a"], [1, "a"], {},
           {"a": 1}, {"name": "a"}]


PATTERN_NAMES = {"^x_": "x_1", "^[0-9]+$": "12", "_id$": "a_id", "^meta\\.": "meta.q",
                 "^[a-z]{1,3}$": "ab"}
COMBINATORS = ("anyOf", "oneOf", "allOf")


def merged(a, b):
    """A rough conjunction of two schemas (for building values, not for checking them)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return b if isinstance(b, dict) else a
    out = dict(a)
    for k, v in b.items():
        if k == "properties" and isinstance(out.get(k), dict) and isinstance(v, dict):
            props = dict(out[k])
            for name, sub in v.items():
                props[name] = merged(props[name], sub) if name in props else sub
            out[k] = props
        elif k == "required" and isinstance(out.get(k), list) and isinstance(v, list):
            out[k] = list(dict.fromkeys(out[k] + v))
        else:
            out[k] = v
    return out


class Candidates:
    """Values built from a schema: enum and const values, pattern and format examples, values at
    and around bounds, arrays and objects of the values that validate their own places (so an
    object's members are right together). Best effort, bounded."""
    CAP = 40

    def __init__(self, root):
        self.root = root
        self.validator = validator(root)

    def valid(self, s, value):
        try:
            return self.validator.evolve(schema=s).is_valid(value)
        except Exception:  # a schema jsonschema cannot read, a recursion
            return False

    def good(self, s, depth):
        """The values built for s that validate it (else a few that do not)."""
        vals = self.of(s, depth)
        ok = [v for v in vals if self.valid(s, v)]
        return ok[:self.CAP] or vals[:3]

    def resolve(self, ref):
        if ref == "#":
            return self.root
        node = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[part] if isinstance(node, dict) else node[int(part)]
        return node

    def of(self, s, depth=0):
        out = []
        if s is True or s == {}:
            return GENERIC[:12] if depth > 2 else list(GENERIC)
        if s is False or not isinstance(s, dict) or depth > 6:
            return [None, 0, "a", [], {}]
        if "const" in s:
            out.append(s["const"])
        if "enum" in s and isinstance(s["enum"], list):
            out += s["enum"]
        siblings = {k: v for k, v in s.items() if k not in COMBINATORS and k != "$ref"}
        if "$ref" in s:
            try:
                out += self.good(merged(self.resolve(s["$ref"]), siblings), depth + 1)
            except (KeyError, IndexError, ValueError, TypeError):
                pass
        for key in ("anyOf", "oneOf"):
            for alt in s.get(key, []):
                out += self.good(merged(siblings, alt), depth + 1)
                out += self.good(alt, depth + 1)[:5]
        if isinstance(s.get("allOf"), list):
            whole = siblings
            for part in s["allOf"]:
                whole = merged(whole, part)
            out += self.good(whole, depth + 1)
            parts = [self.good(p, depth + 1) for p in s["allOf"]]
            objs = [[v for v in p if isinstance(v, dict)] for p in parts]
            for i in range(4):
                m = {}
                for o in objs:
                    if o:
                        m.update(o[min(i, len(o) - 1)])
                out.append(m)
            for p in parts:
                out += p[:5]
        types = s.get("type")
        types = [types] if isinstance(types, str) else (types or self.implied_types(s))
        for t in types:
            out += self.typed(t, s, depth)
        if not out:
            out = list(GENERIC)
        seen, kept = set(), []
        for v in out:
            key = json.dumps(v, sort_keys=True)
            if key not in seen:
                seen.add(key)
                kept.append(v)
        return kept

    @staticmethod
    def implied_types(s):
        t = []
        if any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
            t += ["integer", "number"]
        if any(k in s for k in ("minLength", "maxLength", "pattern", "format")):
            t.append("string")
        if any(k in s for k in ("items", "prefixItems", "minItems", "maxItems")):
            t.append("array")
        if any(k in s for k in ("properties", "required", "additionalProperties",
                                "patternProperties", "propertyNames", "minProperties",
                                "maxProperties")):
            t.append("object")
        return t

    def typed(self, t, s, depth):
        if t == "null":
            return [None]
        if t == "boolean":
            return [True, False]
        if t in ("integer", "number"):
            return self.numbers(s, t == "integer")
        if t == "string":
            return self.strings(s)
        if t == "array":
            return self.arrays(s, depth)
        if t == "object":
            return self.objects(s, depth)
        return []

    @staticmethod
    def numbers(s, integer):
        vals = [0, 1, -1, 0.5, 2.5, -7]
        bounds = [s[k] for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
                  if isinstance(s.get(k), (int, float)) and not isinstance(s.get(k), bool)]
        for b in bounds:
            for delta in (0, 1, -1, 0.5, -0.5, 0.001, -0.001, 1e-9, -1e-9):
                vals.append(b + delta)
            vals += [math.floor(b), math.ceil(b)]
        if len(bounds) >= 2:
            vals.append((bounds[0] + bounds[1]) / 2)
        out = []
        for v in vals:
            if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
                v = int(v)
            if integer and isinstance(v, float):
                continue
            out.append(v)
        return out

    @staticmethod
    def strings(s):
        out = ["", "a", "abc"]
        for p, examples, atom in PATTERNS:
            if s.get("pattern") == p:
                out += examples
                if atom:
                    out += [atom * k for k in range(0, 17)]
        if isinstance(s.get("pattern"), str):
            out += [ex for _, exs, _ in PATTERNS for ex in exs]
        if s.get("format") in FORMAT_VALUES:
            out += FORMAT_VALUES[s["format"]]
        lo, hi = s.get("minLength", 0), s.get("maxLength", 20)
        if isinstance(lo, int) and isinstance(hi, int):
            out += ["a" * k for k in sorted({lo, hi, (lo + hi) // 2, lo + 1}) if 0 <= k <= 300]
            out += ["1" * k for k in sorted({lo, hi}) if 0 <= k <= 300]
        return out

    def arrays(self, s, depth):
        prefix = [self.good(p, depth + 1) for p in s.get("prefixItems", [])]
        items = s.get("items", True if not prefix else None)
        item_vals = self.good(items, depth + 1) if items not in (None, False) else \
            (GENERIC[:8] if items is None else [])
        lo = s.get("minItems", 0) if isinstance(s.get("minItems"), int) else 0
        hi = s.get("maxItems", lo + 3) if isinstance(s.get("maxItems"), int) else lo + 3
        out = []
        for n in sorted({0, lo, min(hi, lo + 1), hi, len(prefix)}):
            if n > 8:
                continue
            for i in range(3):
                arr = []
                for k in range(n):
                    pool = prefix[k] if k < len(prefix) else item_vals
                    if not pool:
                        break
                    arr.append(pool[(i + k) % len(pool)])
                out.append(arr)
        return out

    def objects(self, s, depth):
        props = s.get("properties", {}) if isinstance(s.get("properties"), dict) else {}
        req = [n for n in s.get("required", []) if isinstance(n, str)]
        pp = s.get("patternProperties", {}) if isinstance(s.get("patternProperties"),
                                                          dict) else {}
        ap = s.get("additionalProperties", True)

        def pool_for(name):
            if name in props:
                return self.good(props[name], depth + 1)
            subs = [sub for p, sub in pp.items() if re.search(p, name)]
            if subs:
                return self.good(subs[0], depth + 1)
            return self.good(ap, depth + 1) if ap is not False else [0]
        extra_names = ["zz"] + [PATTERN_NAMES.get(p, "x") for p in pp] + \
            ["x_1", "12", "a", "ab", "name"]
        pn = s.get("propertyNames")
        if isinstance(pn, dict):
            extra_names = [v for v in self.good(pn, depth + 1) if isinstance(v, str)][:6] + \
                extra_names
        extra_names = [n for n in dict.fromkeys(extra_names) if n not in props]
        pools = {n: pool_for(n) for n in list(props) + req + extra_names}
        out = []
        everything = list(dict.fromkeys(req + list(props)))
        for i in range(4):
            for names in (req, everything):
                obj = {n: pools[n][(i + k) % len(pools[n])] for k, n in enumerate(names)}
                out.append(obj)
                for k in range(3):  # one, two or three other members
                    more = dict(obj)
                    for en in extra_names[k:k + 1 + k]:
                        more[en] = pools[en][i % len(pools[en])]
                    out.append(more)
        return out


NOTHING = object()


def satisfying_candidate(schema):
    """A value of the pool that validates the schema, or NOTHING."""
    pool = list(GENERIC)
    try:
        pool += Candidates(schema).of(schema)
    except RecursionError:
        pass
    for v in pool:
        if not errors_of(schema, v):
            return v
    return NOTHING


# ---- Requests, run, checks ----------------------------------------------------------------------

def build_requests(schemas, seed, samples, max_tokens):
    """One request of "n": samples for even schemas, `samples` seeded requests for odd ones."""
    reqs = []  # (request, schema index)
    for i, s in enumerate(schemas):
        def fields(k):
            if (i + k) % 2 == 0:
                return {"guided_json": s}
            return {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": f"s{i}", "schema": s}}}
        base = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
                "temperature": 1.0}
        if i % 2 == 0 and samples > 1:
            r = dict(base, id=f"s{i}", n=samples, seed=seed * 100003 + i)
            r.update(fields(0))
            reqs.append((r, i))
        else:
            for k in range(samples):
                r = dict(base, id=f"s{i}_{k}", seed=seed * 100003 + i * 7 + k)
                r.update(fields(k))
                reqs.append((r, i))
    return reqs


def samples_of(rec):
    """(text, finish_reason, completion_tokens) of each sample of a record."""
    if "choices" in rec:
        return [(c.get("text"), c["finish_reason"], c.get("completion_tokens"))
                for c in rec["choices"]]
    return [(rec.get("text"), rec["finish_reason"], rec.get("completion_tokens"))]


def reason_of(message):
    """The refusal's reason: the text after 'JSON schema at WHERE: ' (else after the field)."""
    m = re.search(r"JSON schema at (?:\S+?): (.*)$", message or "", re.S)
    if m:
        return m.group(1)
    m = re.search(r"\(json_schema\): (.*)$", message or "", re.S)
    return m.group(1) if m else (message or "")


def reason_group(reason):
    """The reason with its quoted texts and numbers blanked, to group alike refusals."""
    g = re.sub(r'"(?:[^"\\]|\\.)*"', '"…"', reason)
    g = re.sub(r"-?\d+(\.\d+)?", "N", g)
    return g


def kinds_of(v):
    if v is None:
        return ["null"]
    if isinstance(v, bool):
        return ["boolean"]
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return ["integer", "number"]
    if isinstance(v, float):
        return ["number"]
    return [{str: "string", list: "array", dict: "object"}[type(v)]]


def named_kinds(schema):
    """The kinds a schema's root names (its type, else its keywords' kinds); [] if none."""
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    if t:
        return [t] if isinstance(t, str) else list(t)
    kinds = Candidates.implied_types(schema)
    for v in schema.get("enum", []) + ([schema["const"]] if "const" in schema else []):
        kinds += kinds_of(v)
    return kinds


def run_batch(args, model, schemas, tag, samples):
    reqs = build_requests(schemas, args.seed, samples, args.max_tokens)
    # 65: every request failed (each has its error record): a batch of refused schemas.
    records, so = oracle_run.run_batch(args.tpllama, model, [r for r, _ in reqs], args.work, tag,
                                       ok_codes=(0, 65))
    return records, reqs, so


def check_model(args, model, schemas, tags, tag, samples):
    """Runs one batch and checks it; returns (failure lines, summary dict)."""
    records, reqs, so = run_batch(args, model, schemas, tag, samples)
    if records is None:
        return [f"{tag}: tpllama exited non-zero"], {}
    failures = []
    invalid = []
    counts = collections.Counter()
    refused = {}  # schema index -> message
    notes = collections.Counter()
    for r, i in reqs:
        rec = records.get(r["id"])
        if rec is None:
            failures.append(f"{tag} {r['id']}: no record")
            continue
        if rec.get("finish_reason") == "error" or "error" in rec and rec.get("error"):
            counts["error"] += r.get("n", 1)
            refused.setdefault(i, rec.get("error", ""))
            continue
        for text, reason, ntok in samples_of(rec):
            counts[reason] += 1
            if reason == "stop":
                try:
                    value, repeated = parse(text)
                except ValueError as e:
                    invalid.append((i, r["id"], text, [f"not JSON: {e}"]))
                    continue
                if repeated:
                    notes["records with a repeated key"] += 1
                if text != text.strip():
                    notes["records with whitespace around the value"] += 1
                if re.search(r"\n[ \t]*\n", text):
                    notes["records with a blank line (two whitespace slots in a row)"] += 1
                errs = errors_of(schemas[i], value)
                if errs:
                    invalid.append((i, r["id"], text, errs))
            elif reason == "length":
                if ntok != r["max_tokens"]:
                    failures.append(f"{tag} {r['id']}: length after {ntok} of "
                                    f"{r['max_tokens']} tokens")
            else:
                failures.append(f"{tag} {r['id']}: finish_reason {reason!r}")
    # Refusals: a claim that no value satisfies must hold for every value of the pool.
    # "The grammar can write none of the schema's values" claims no less than that values exist
    # beyond what it writes: where none of the pool validates either, it is an unsatisfiable
    # schema too (its message undersells it), else an honest limit, counted as a refusal.
    groups = collections.defaultdict(list)
    right_unsat, wrongful, undersold = [], [], []
    for i, msg in sorted(refused.items()):
        reason = reason_of(msg)
        if "no value satisfies" in reason or "can write none of the schema's values" in reason:
            v = satisfying_candidate(schemas[i])
            if v is NOTHING:
                right_unsat.append(i)
                if "no value satisfies" not in reason:
                    undersold.append(i)
                continue
            if "no value satisfies" in reason:
                wrongful.append((i, msg, v))
        groups[reason_group(reason)].append((i, msg))
    n = len(schemas)
    counted = len(refused) - len(right_unsat)
    share = counted / n if n else 0.0
    print(f"\n== {tag}: {n} schemas, {len(reqs)} requests, {samples} samples each, "
          f"max_tokens {args.max_tokens}, temperature 1, seed {args.seed}")
    print(f"   samples: {counts['stop']} stop, {counts['length']} length, {counts['error']} "
          f"error (refused)")
    print(f"   refused: {len(refused)} schemas; rightly refused as unsatisfiable: "
          f"{len(right_unsat)} ({len(undersold)} of them said only that the grammar can write "
          f"none); other refusals: {counted} = {100 * share:.1f}% of generated (limit < 20%)")
    print(f"   invalid stop records: {len(invalid)}; wrongful unsatisfiable claims: "
          f"{len(wrongful)}")
    if so:
        print(f"   structured outputs: {so.get('grammars_compiled')} grammars compiled in "
              f"{1e3 * (so.get('compile_seconds') or 0):.1f} ms; {so.get('masks')} masks, mean "
              f"{1e3 * ((so.get('mask_seconds') or {}).get('mean') or 0):.3f} ms")
    for k, v in sorted(notes.items()):
        print(f"   note: {v} {k} (json.loads keeps the last)" if "repeated" in k
              else f"   note: {v} {k}")
    if groups:
        print("   refusal reasons (count, reason with quoted texts and numbers blanked; "
              "one example):")
        for g, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            i, msg = items[0]
            print(f"   {len(items):5d}  {g}")
            print(f"          e.g. s{i}: {reason_of(msg)}")
            print(f"               {json.dumps(schemas[i])[:400]}")
    for i, rid, text, errs in invalid:
        failures.append(f"{tag} {rid}: INVALID stop record\n     schema: {json.dumps(schemas[i])}"
                        f"\n     text:   {text!r}\n     errors: {'; '.join(errs)[:1000]}"
                        f"\n     tags:   {tags[i]}")
    for i, msg, v in wrongful:
        named = named_kinds(schemas[i])
        unnamed = named and not any(k in named for k in kinds_of(v))
        failures.append(f"{tag} s{i}: WRONGFUL unsatisfiable claim ({reason_of(msg)})"
                        + (" [the witness is of a kind the root does not name]" if unnamed
                           else "") + "\n"
                        f"     schema: {json.dumps(schemas[i])}\n     validates: {json.dumps(v)}")
    if share >= 0.2:
        failures.append(f"{tag}: {counted} of {n} schemas refused ({100 * share:.1f}% >= 20%)")
    if n >= 10 and counts["stop"] < (counts["stop"] + counts["length"]) // 2:
        failures.append(f"{tag}: only {counts['stop']} samples finished with stop")
    summary = {"schemas": n, "refused": len(refused), "right_unsat": len(right_unsat),
               "invalid": len(invalid), "wrongful": len(wrongful), "stop": counts["stop"],
               "length": counts["length"]}
    with open(os.path.join(args.work, f"{tag}_report.json"), "w") as f:
        json.dump({"summary": summary,
                   "invalid": [{"schema": schemas[i], "id": rid, "text": t, "errors": e}
                               for i, rid, t, e in invalid],
                   "wrongful": [{"schema": schemas[i], "error": m, "validates": v}
                                for i, m, v in wrongful],
                   "refused": [{"schema": schemas[i], "error": m}
                               for i, m in sorted(refused.items())]}, f, indent=1)
    return failures, summary


# ---- A reproducer, smaller: --minimize -------------------------------------------------------

def reductions(node):
    """Every schema one step smaller than node: a key (but "type"), a list item or a property
    left out."""
    if isinstance(node, dict):
        for k in list(node):
            if k != "type":  # without it, any other kind validates: a different failure
                yield {kk: v for kk, v in node.items() if kk != k}
        for k, v in node.items():
            for smaller in reductions(v):
                yield dict(node, **{k: smaller})
    elif isinstance(node, list):
        for i in range(len(node)):
            if len(node) > 1:
                yield node[:i] + node[i + 1:]
        for i, v in enumerate(node):
            for smaller in reductions(v):
                yield node[:i] + [smaller] + node[i + 1:]


def failing(args, model, schemas, kind):
    """Which of the schemas still show the failure: "wrongful" (a claim that no value satisfies
    it, which a value disproves) or "invalid" (an invalid stop record among 32 samples x 2)."""
    reqs = [{"id": f"m{i}_{k}", "prompt": PROMPTS[k], "guided_json": s,
             "max_tokens": 1 if kind == "wrongful" else args.max_tokens, "temperature": 1.0,
             "n": 1 if kind == "wrongful" else 32, "seed": args.seed + k}
            for i, s in enumerate(schemas) for k in range(1 if kind == "wrongful" else 2)]
    records, _ = oracle_run.run_batch(args.tpllama, model, reqs, args.work, "min",
                                      ok_codes=(0, 65))
    hit = [False] * len(schemas)
    if records is not None:
        for rec in records.values():
            i = int(rec["id"][1:].split("_")[0])
            if kind == "wrongful":
                msg = rec.get("error") or ""
                hit[i] = ("no value satisfies" in msg and
                          satisfying_candidate(schemas[i]) is not NOTHING)
                continue
            if rec.get("error"):
                continue
            for text, reason, _ in samples_of(rec):
                if reason == "stop":
                    try:
                        value, _ = parse(text)
                    except ValueError:
                        hit[i] = True
                        continue
                    if errors_of(schemas[i], value):
                        hit[i] = True
    return hit


def minimize(args, model, schema, kind):
    """The smallest schema (greedily) that still shows the failure."""
    if not failing(args, model, [schema], kind)[0]:
        print(f"the schema does not show a {kind} failure")
        return schema
    while True:
        smaller = sorted({json.dumps(r): r for r in reductions(schema)}.values(),
                         key=lambda r: len(json.dumps(r)))
        found = None
        for start in range(0, len(smaller), 64):
            chunk = smaller[start:start + 64]
            hit = failing(args, model, chunk, kind)
            if any(hit):
                found = chunk[hit.index(True)]
                break
        if found is None:
            return schema
        schema = found
        print("  ", json.dumps(schema))


def generate(seed, count):
    gen = Generator(random.Random(seed))
    schemas, tags = [], []
    for _ in range(count):
        s, t = gen.schema()
        schemas.append(s)
        tags.append(t)
    return schemas, tags


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpllama", required=True)
    ap.add_argument("--models", required=True, help="the shipped models/ directory")
    ap.add_argument("--llama3-tokenizer", required=True, help="Meta's Llama 3 tokenizer.json")
    ap.add_argument("--work", required=True)
    ap.add_argument("--schemas", type=int, default=500, help="schemas on stories260K")
    ap.add_argument("--llama3-schemas", type=int, default=None,
                    help="schemas on the Llama 3 vocabulary model: the first of those on "
                    "stories260K (default: a third of --schemas, at most 150; 0 skips it)")
    ap.add_argument("--samples", type=int, default=2, help="samples per schema")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument("--schema", help="a JSON file (or JSON text) of one schema: ask only for it")
    ap.add_argument("--minimize", choices=["wrongful", "invalid"],
                    help="with --schema: shrink it while the failure shows (on stories260K)")
    ap.add_argument("--print-schemas", action="store_true", help="print the schemas and exit")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    n3 = args.llama3_schemas if args.llama3_schemas is not None else min(150, args.schemas // 3)
    if args.schema:
        text = open(args.schema).read() if os.path.exists(args.schema) else args.schema
        schemas, tags = [json.loads(text)], [["given"]]
        n3 = 1 if n3 else 0
    else:
        schemas, tags = generate(args.seed, args.schemas)
    if args.print_schemas:
        for s, t in zip(schemas, tags):
            print(json.dumps(s), t)
        return 0
    tok = args.llama3_tokenizer
    if n3 and not os.path.exists(tok):
        sys.exit(f"{tok} is missing: run `npm ci --prefix tests/oracles` (scripts/setup.sh does)")
    if args.minimize:
        if not args.schema:
            sys.exit("--minimize takes --schema")
        model, _ = oracle_run.models(args.tpllama, args.models, tok, args.work, llama3=False)
        small = minimize(args, model, schemas[0], args.minimize)
        print("minimal:", json.dumps(small))
        if args.minimize == "wrongful":
            print("validates:", json.dumps(satisfying_candidate(small)))
        return 0
    stories, llama3 = oracle_run.models(args.tpllama, args.models, tok, args.work, llama3=n3 > 0)
    failures, s1 = check_model(args, stories, schemas, tags, "stories260K", args.samples)
    if n3:
        f3, _ = check_model(args, llama3, schemas[:n3], tags[:n3], "llama3-vocab", args.samples)
        failures += f3
    print()
    for f in failures:
        print("FAIL", f)
    print("all stop records valid, no wrongful unsatisfiable claim, refusals under 20%"
          if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
