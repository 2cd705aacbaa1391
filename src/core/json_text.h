// Bounded JSON for hostile input: the nesting a text may have before it is parsed (our code walks
// values recursively: copies, dumps, template values), and bounded text of a value for messages (a
// plain dump() of a value a million levels deep would recurse until the stack overflows).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tpllama {

constexpr size_t kMaxShownChars = 120;
constexpr int kMaxShownDepth = 3;
// Real files and requests nest a few levels (a tool's JSON schema a dozen): 256 leaves room, and
// bounds every recursive walk of a parsed value far inside any thread's stack.
constexpr int kMaxJsonDepth = 256;

std::string clip(std::string s);
std::string describe_json(const nlohmann::json& v);

// The most values one request line may hold (its arrays' and objects' members: a token-id prompt of
// a million-token context is a quarter of it). Parsed, 12 million empty arrays took more than a
// gigabyte: a line of more is refused before it is parsed.
constexpr size_t kMaxLineJsonValues = size_t{1} << 22;

// Why text may not be parsed: "JSON nested deeper than 256 levels (at byte N)", or, past
// max_values, "JSON of more than N values (at byte N)"; nullopt when its arrays and objects nest
// kMaxJsonDepth levels or fewer and hold at most max_values members. A linear scan that skips
// strings; it does not validate (the parser does).
std::optional<std::string> json_depth_error(std::string_view text, size_t max_values = SIZE_MAX);
// Throws Error "<what>: <json_depth_error>" when text nests too deep; what names the file.
void check_json_depth(std::string_view text, const std::string& what);
// text parsed, after check_json_depth; running out of memory becomes an Error naming `what`. The
// parser's own exceptions (invalid JSON) pass through for the caller's message.
nlohmann::json parse_json(std::string_view text, const std::string& what);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what);

}  // namespace tpllama
