// Bounded JSON: the nesting check run before parsing, and bounded rendering of values for messages.
#include "core/json_text.h"

#include <new>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tpllama {

using nlohmann::json;

std::string clip(std::string s) {
  if (s.size() > kMaxShownChars) s = s.substr(0, kMaxShownChars) + "...";
  return s;
}

namespace {
void describe_into(const json& v, int depth, std::string& out) {
  if (out.size() > kMaxShownChars) return;
  if (!v.is_structured()) {
    out += clip(v.dump(-1, ' ', false, json::error_handler_t::replace));
    return;
  }
  if (depth >= kMaxShownDepth) {
    out += v.is_array() ? "[...]" : "{...}";
    return;
  }
  out += v.is_array() ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end() && out.size() <= kMaxShownChars; ++it) {
    if (!first) out += ',';
    first = false;
    if (v.is_object())
      out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ":";
    describe_into(*it, depth + 1, out);
  }
  out += v.is_array() ? ']' : '}';
}
}  // namespace

std::string describe_json(const json& v) {
  std::string out;
  describe_into(v, 0, out);
  return clip(std::move(out));
}

std::optional<std::string> json_depth_error(std::string_view text, size_t max_values) {
  int depth = 0;
  size_t values = 0;  // members of arrays and objects: their first, and one more at each comma
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // an escaped quote does not end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{' || c == ',') {
      if (c != ',' && ++depth > kMaxJsonDepth)
        return detail::concat("JSON nested deeper than ", kMaxJsonDepth, " levels (at byte ", i,
                              ")");
      if (++values > max_values)
        return detail::concat("JSON of more than ", max_values, " values (at byte ", i, ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

void check_json_depth(std::string_view text, const std::string& what) {
  if (std::optional<std::string> error = json_depth_error(text)) fail(what, ": ", *error);
}

namespace {
template <class Json>
Json parse_checked(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return Json::parse(text);
  } catch (const std::bad_alloc&) {
    fail(what, ": out of memory holding its ", text.size(), " bytes of JSON as values");
  }
}
}  // namespace

json parse_json(std::string_view text, const std::string& what) {
  return parse_checked<json>(text, what);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what) {
  return parse_checked<nlohmann::ordered_json>(text, what);
}

}  // namespace tpllama
