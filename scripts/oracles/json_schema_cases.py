#!/usr/bin/env python3
"""Writes tests/data/grammar/json_schema_cases.json: real-world-shaped JSON Schemas, and for each
texts (instances generated from the schema, then mutated) with whether python3-jsonschema
(Draft 2020-12, with its format checker) validates them under the strict reading tpllama's
grammars take (an object's properties absent from 'properties' and an array's items beyond
'prefixItems' are refused unless the schema allows them); the expected values of
tests/unit/json_schema_test.cpp. Texts are written compact or indented by 2, keys in the
schema's order, whitespace runs of at most 20. (Format "time" is left out: without the
rfc3339-validator module, which Debian lacks, jsonschema checks it as draft 3's HH:MM:SS, not
RFC 3339's full-time; tests/unit/json_schema_test.cpp checks it against RFC 3339's examples.)

Then schemas of every keyword combination the grammars read (bounds on integers and numbers,
enums and consts beside other keywords, allOf, oneOf, patternProperties, propertyNames, counts of
properties, lengths beside a pattern, closed arrays, whitespace turned off), each with candidate
values chosen by hand around its edges, labelled the same way. Their texts write numbers without
an exponent and the other members after the named properties, as the grammars do. A case with
"options": {"any_whitespace": false} expects its indented texts refused: the label is jsonschema's
and whether the text has no whitespace outside its strings.

Usage: scripts/oracles/json_schema_cases.py > tests/data/grammar/json_schema_cases.json
"""
import copy
import json
import random
import re
import sys

import jsonschema

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer", "minimum": 0},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "placed": {"type": "string", "format": "date-time"},
            "status": {"enum": ["new", "paid", "shipped"]},
            "lines": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{3}$"},
                        "qty": {"type": "integer", "minimum": 1},
                        "price": {"type": "number"},
                    },
                    "required": ["sku", "qty", "price"],
                },
            },
            "note": {"type": ["string", "null"]},
        },
        "required": ["id", "status", "lines"],
    },
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "label": {"enum": ["positive", "negative", "neutral", 1, None, True]},
    "choice": {
        "anyOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
             "required": ["kind", "x"]},
            {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "boolean"}},
             "required": ["kind", "y"]},
        ]
    },
    "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]},
    "dates": {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"}}, "required": ["day"]},
    "map": {"type": "object", "additionalProperties": {"type": "integer"}},
    "anything": {},
    "strings": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 2,
                "maxItems": 4},
}

# name: (schema, candidate values[, options])
EDGE_CASES = {
    "age": ({"type": "integer", "minimum": 0, "maximum": 120},
            [-1, 0, 1, 55, 119, 120, 121, 1000, 3.5, "5", None]),
    "bounded-number": ({"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25},
                       [-1.5, -1.49, -1, 0, 0.5, 2.25, 2.26, 2, 3, -2, 1.125, 2.2500001]),
    "double-bounds": ({"type": "number", "exclusiveMinimum": 0.1, "maximum": 0.2},
                      [0.1, 0.11, 0.2, 0.2000001, 0.15, 0.100000000000001, 0]),
    "negative-integers": ({"type": "integer", "minimum": -305, "exclusiveMaximum": -7},
                          [-306, -305, -300, -200, -99, -8, -7, 0, 7]),
    "oneOf-number": ({"oneOf": [{"type": "integer"}, {"type": "number"}]},
                     [-52, 0, 1.5, -0.25, 3, "x", 2.0001]),
    "oneOf-tagged": ({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["kind", "x"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
         "required": ["kind"], "additionalProperties": False}]},
        [{"kind": "a", "x": 1}, {"kind": "b"}, {"kind": "b", "y": "s"}, {"kind": "a"},
         {"kind": "c"}, {"kind": "b", "y": 1}]),
    "enum-filtered": ({"type": "string", "enum": ["a", 1, "bb", None, "c"], "maxLength": 1},
                      ["a", "bb", 1, None, "c", "d"]),
    "enum-objects": ({"enum": [{"a": 1}, {"a": "x"}], "properties": {"a": {"type": "integer"}}},
                     [{"a": 1}, {"a": "x"}, {"a": 2}]),
    "enum-arrays": ({"enum": [[1, 2], ["x"]], "items": {"type": "integer"}},
                    [[1, 2], ["x"], [1]]),
    "anyOf-typed": ({"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": -10}]},
                    [0, 10, -10, 11, -11, 9, "s", 10.5]),
    "allOf-merged": ({"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
         "required": ["a"], "additionalProperties": False},
        {"properties": {"a": {"minimum": 0}}, "required": ["b"], "additionalProperties": True}]},
        [{"a": 0, "b": "x"}, {"a": -1, "b": "x"}, {"a": 0}, {"a": 5, "b": "y"}, {"b": "x"}]),
    "required-false": ({"properties": {"a": False}, "required": ["a"]},
                       [5, None, {}, {"a": 1}, "x", [1]]),
    "pattern-property-listed": ({"type": "object", "properties": {"x_id": {"type": "integer"}},
                                 "patternProperties": {"^x_": {"minimum": 0}},
                                 "additionalProperties": False},
                                [{"x_id": 1}, {"x_id": -1}, {}, {"x_id": "s"}]),
    "oneOf-required": ({"oneOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
        [{"a": 1}, {"b": True}, {"a": 1, "b": True}, {}]),
    "dates-that-exist": ({"type": "string", "format": "date"},
                         ["2024-02-29", "2023-02-29", "2023-02-28", "2024-04-31", "2024-04-30",
                          "0000-01-01", "0001-01-01", "1900-02-29", "2000-02-29"]),
    "items-false": ({"type": "array", "items": False}, [[], [1], [None]]),
    "prefix-closed": ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                       "items": False, "minItems": 1},
                      [[], [1], [1, "a"], [1, "a", 2], ["a"]]),
    "pattern-properties": ({"type": "object", "patternProperties": {"^x_": {"type": "integer"}},
                            "additionalProperties": False},
                           [{}, {"x_a": 1}, {"x_a": "s"}, {"y": 1}, {"x_a": 1, "x_b": 2}]),
    "property-names": ({"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"},
                        "additionalProperties": {"type": "boolean"}, "maxProperties": 2},
                       [{}, {"ab": True}, {"ABC": True}, {"abcd": False}, {"a": True, "b": False},
                        {"a": True, "b": False, "c": True}, {"a": 1}]),
    "property-counts": ({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "minProperties": 1, "maxProperties": 2, "additionalProperties": False},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"c": 3}, {"b": 1, "c": 2}]),
    "additional-schema": ({"type": "object", "properties": {"id": {"type": "integer"}},
                           "required": ["id"],
                           "additionalProperties": {"type": "string", "maxLength": 3}},
                          [{"id": 1}, {"id": 1, "x": "ab"}, {"id": 1, "x": "abcd"},
                           {"id": 1, "x": 2}, {"x": "a"}, {"id": 1, "id2": "a"},
                           {"id": 1, "": "a"}, {"id": 1, "i": "a", "j": "b"}]),
    "pattern-length": ({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
                       ["a", "ab", "abcd", "abcde", "AB", ""]),
    "format-length": ({"type": "string", "format": "date", "maxLength": 10},
                      ["2024-01-01", "x", "2024-13-01"]),
    "compact": ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
                 "required": ["a"], "additionalProperties": False},
                [{"a": []}, {"a": [1, 2]}, {"a": ["x"]}, {}], {"any_whitespace": False}),
}

WORDS = ["a", "Bob", "x y", "héllo", "日本", "quote\"d", "back\\slash", "new\nline", "", "tab\t"]


def strict(schema):
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            if "prefixItems" in node and "items" not in node:
                node["items"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    return s


def resolve(root, schema):
    ref = schema.get("$ref")
    if ref == "#":
        return root
    if ref:
        return root["$defs"][ref.split("/")[-1]]
    return schema


def instance(root, schema, rng, depth=0):
    schema = resolve(root, schema)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "anyOf" in schema:
        return instance(root, rng.choice(schema["anyOf"]), rng, depth)
    t = schema.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t is None:
        t = "object" if "properties" in schema or "additionalProperties" in schema else None
    if t is None:
        return rng.choice([1, "s", None, [1, 2], {"k": False}, 2.5])
    if t == "object":
        if "properties" not in schema:
            return {rng.choice(WORDS): instance(root, schema["additionalProperties"], rng, depth + 1)
                    for _ in range(rng.randint(0, 3))}
        out = {}
        for name, sub in schema["properties"].items():
            if name in schema.get("required", []) or rng.random() < 0.6:
                if depth > 3 and name == "children":
                    continue
                out[name] = instance(root, sub, rng, depth + 1)
        return out
    if t == "array":
        if "prefixItems" in schema:
            return [instance(root, s, rng, depth + 1) for s in schema["prefixItems"]]
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems", lo + 3)
        if depth > 3:
            hi = lo
        return [instance(root, schema["items"], rng, depth + 1) for _ in range(rng.randint(lo, hi))]
    if t == "string":
        fmt = schema.get("format")
        if fmt == "email":
            return rng.choice(["a@b.com", "first.last@host.org", "x+y@mail.example.net"])
        if fmt == "uuid":
            return "%08x-%04x-%04x-%04x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 16, 16, 48))
        if fmt == "date":
            return "2024-%02d-%02d" % (rng.randint(1, 12), rng.randint(1, 28))
        if fmt == "time":
            return rng.choice(["10:20:30Z", "23:59:59+02:00", "00:00:00.5Z"])
        if fmt == "date-time":
            return "2024-05-%02dT12:34:56Z" % rng.randint(1, 28)
        if "pattern" in schema:
            return "ABC-%03d" % rng.randint(0, 999)
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 12)
        w = rng.choice(WORDS)
        while len(w) < lo:
            w += "z"
        return w[:hi]
    if t == "integer":
        lo = schema.get("minimum", -50)
        return rng.randint(lo, lo + 100)
    if t == "number":
        return rng.choice([0, -1.5, 3.25, 1e-3, 12])
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    raise ValueError(t)


def mutate(value, rng):
    if isinstance(value, dict) and value and rng.random() < 0.7:
        v = dict(value)
        key = rng.choice(list(v))
        op = rng.randrange(3)
        if op == 0:
            del v[key]
        elif op == 1:
            v[key] = mutate(v[key], rng)
        else:
            v["extra"] = 1
        return v
    if isinstance(value, list) and value and rng.random() < 0.7:
        v = list(value)
        i = rng.randrange(len(v))
        if rng.random() < 0.5:
            del v[i]
        else:
            v[i] = mutate(v[i], rng)
        return v
    return rng.choice([None, "text", 7, -3, 2.5, True, [], {}, "2024-13-01", "not-an-email",
                       "abc-123", "", "x" * 30])


def main():
    rng = random.Random(20261202)
    cases = []
    for name, schema in SCHEMAS.items():
        validator = jsonschema.Draft202012Validator(strict(schema),
                                                    format_checker=jsonschema.FormatChecker())
        texts, seen = [], set()
        for k in range(60):
            value = instance(schema, schema, rng)
            if k % 2:
                value = mutate(value, rng)
            indent = 2 if k % 3 == 0 else None
            text = json.dumps(value, ensure_ascii=False, indent=indent,
                              separators=(",", ": ") if indent else (",", ":"))
            if re.search(r"\s{21}", text):  # the grammar's whitespace runs stop at 20
                text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            if text in seen:
                continue
            seen.add(text)
            texts.append([text, validator.is_valid(value)])
        cases.append({"name": name, "schema": schema, "texts": texts})
    for name, (schema, values, *options) in EDGE_CASES.items():
        validator = jsonschema.Draft202012Validator(strict(schema),
                                                    format_checker=jsonschema.FormatChecker())
        compact_only = bool(options) and options[0].get("any_whitespace") is False
        texts = []
        for value in values:
            for indent in (None, 2):
                text = json.dumps(value, ensure_ascii=False, indent=indent,
                                  separators=(",", ": ") if indent else (",", ":"))
                if any(t[0] == text for t in texts):
                    continue
                valid = validator.is_valid(value)
                if compact_only:
                    valid = valid and text == json.dumps(value, ensure_ascii=False,
                                                         separators=(",", ":"))
                texts.append([text, valid])
        case = {"name": name, "schema": schema, "texts": texts}
        if options:
            case["options"] = options[0]
        cases.append(case)
    json.dump({"about": __doc__.strip().splitlines()[0], "cases": cases}, sys.stdout,
              ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
