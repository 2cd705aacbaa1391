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
    json.dump({"about": __doc__.strip().splitlines()[0], "cases": cases}, sys.stdout,
              ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
