// Python `str` semantics over UTF-8 bytes (whitespace, strip/split, code-point indexing, case,
// repr, float repr), so that text rendered by the Jinja subset matches Jinja2 byte for byte. Case
// mapping is utf8proc's; UTF-8 decoding and counting are core/utf8.h's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpllama::jinja::text {

// str.isspace() for one code point (also what Python's `\s` matches).
bool is_space(char32_t c);

// The string split into code points, each a view into `s`.
std::vector<std::string_view> code_points(std::string_view s);

// str.strip() / lstrip() / rstrip(): without chars, Python whitespace; with chars, those code
// points.
std::string strip(std::string_view s, bool left, bool right);
std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right);

// str.split() on whitespace runs, and str.split(sep); maxsplit < 0 means no limit.
std::vector<std::string> split_whitespace(std::string_view s, std::int64_t maxsplit);
std::vector<std::string> split(std::string_view s, std::string_view sep, std::int64_t maxsplit);

// str.replace(old, new, count); count < 0 replaces all, an empty `from` inserts between code
// points.
std::string replace(std::string_view s, std::string_view from, std::string_view to,
                    std::int64_t count);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
// str.capitalize(): first letter upper, the rest lower.
std::string capitalize(std::string_view s);
// str.title(): a cased letter after an uncased character is upper, any other lower.
std::string title(std::string_view s);
// str.islower() / str.isupper(): at least one cased letter, all of one case.
bool is_lower(std::string_view s);
bool is_upper(std::string_view s);

// repr() of a str: quotes chosen as Python does, escapes for controls and unprintable code points.
std::string repr(std::string_view s);
// repr() of a float: shortest round-trip digits, fixed notation for exponents in [-4, 16).
std::string float_repr(double d);

}  // namespace tpllama::jinja::text
