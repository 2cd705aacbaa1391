#!/usr/bin/env python3
"""Writes tests/data/grammar/regex_cases.json: for each pattern, texts and whether Python's
re.fullmatch matches each, read with re.ASCII (the classes tpllama's regexes use) and read by
Unicode (Python's default, as python3-jsonschema reads a pattern); the expected values of
tests/unit/grammar_test.cpp, which holds a grammar to match a text only where both readings do,
and to match an ASCII text exactly where both do. Texts are the pattern's own examples plus seeded random strings over
the characters the pattern names and a few others, so most patterns see both answers.

Usage: scripts/oracles/regex_cases.py > tests/data/grammar/regex_cases.json
"""
import json
import random
import re
import sys

CASES = [
    ("abc", ["abc", "ab", "abcd", ""]),
    ("a|b|cd", ["a", "b", "cd", "c", "ab"]),
    ("a*b+c?", ["b", "aab", "abbbc", "ac", "abcc", ""]),
    ("(ab)*", ["", "ab", "abab", "aba", "ba"]),
    ("(?:ab|c){2,3}", ["abc", "cc", "ababab", "c", "abababab", "cabc"]),
    ("x{3}", ["xxx", "xx", "xxxx"]),
    ("x{2,}", ["xx", "xxxxxx", "x"]),
    ("x{,2}y", ["y", "xy", "xxy", "xxxy"]),
    ("[a-c]+", ["abcabc", "abd", "", "cab"]),
    ("[^a-c]+", ["xyz", "xaz", "\n", "é"]),
    ("[]a]+", ["]", "a]a", "b"]),
    ("[a\\-z]", ["-", "a", "z", "b"]),
    ("\\d{3}-\\d{4}", ["555-1234", "55-1234", "abc-defg"]),
    ("\\w+@\\w+\\.com", ["me@host.com", "me@host.org", "@host.com"]),
    ("\\s*x\\s*", [" x ", "\tx\n", "x", " y "]),
    ("\\D\\W\\S", ["a b", "1 b", "a bb"]),
    (".", ["a", "\n", "é", "日", "😀", "ab"]),
    (".+", ["héllo wörld", "a\nb"]),
    ("é+|日本", ["ééé", "日本", "日", "e"]),
    ("[à-ÿ]+", ["àéÿ", "a", "Ā"]),
    ("[\u0100-\u07ff\u0800-\uffff]", ["Ā", "߿", "ࠀ", "\uffff", "a", "😀"]),
    ("[^\u0000-\u007f]", ["é", "日", "😀", "a"]),
    ("[\U0001F600-\U0001F64F]+", ["😀😃", "😐", "🙏", "🚀"]),
    ("\\x41\\u00e9", ["Aé", "Ae"]),
    ("^(true|false)$", ["true", "false", "truefalse", "tru"]),
    ("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?",
     ["0", "-12.5e+3", "01", "1.", "3.14", "1e10", "-", "1E-7"]),
    ("\\d{4}-\\d{2}-\\d{2}", ["2024-01-31", "2024-1-31", "20240131"]),
    ('"([^"\\\\]|\\\\.)*"', ['"abc"', '"a\\"b"', '"abc', '""', '"a"b"']),
    ("(a|ab)(c|bcd)(d*)", ["abcd", "abcdd", "acd", "abd"]),
    ("((a)|b)+?c", ["abac", "c", "bbc", "ab"]),
    ("a{0}b", ["b", "ab"]),
    ("(a*)*b", ["aaab", "b", "aaa"]),
    ("[.]\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$", [".\\.*+?()[]{}|^$", "..*+?()[]{}|^$"]),
    ("a{", ["a{", "a"]),
    ("[\\d\\s]+", ["1 2\t3", "1a"]),
    ("[\\w.-]+", ["a.b-c_d", "a b"]),
]

ALPHABET = "abcdxyz019 -._\t\n\"\\éü日😀{}"


def main():
    rng = random.Random(20261202)
    out = []
    for pattern, examples in CASES:
        compiled = re.compile(pattern, re.ASCII)
        unicode = re.compile(pattern)
        chars = sorted(set("".join(examples)) | set(ALPHABET))
        texts = list(examples)
        for _ in range(40):
            base = rng.choice(examples)
            t = list(base)
            for _ in range(rng.randint(0, 3)):
                op = rng.randrange(3)
                if op == 0 and t:
                    del t[rng.randrange(len(t))]
                elif op == 1:
                    t.insert(rng.randint(0, len(t)), rng.choice(chars))
                elif t:
                    t[rng.randrange(len(t))] = rng.choice(chars)
            texts.append("".join(t))
        seen = []
        for t in texts:
            if t not in seen:
                seen.append(t)
        out.append({"pattern": pattern,
                    "texts": [[t, compiled.fullmatch(t) is not None,
                               unicode.fullmatch(t) is not None] for t in seen]})
    json.dump({"about": __doc__.strip().splitlines()[0], "cases": out}, sys.stdout,
              ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
