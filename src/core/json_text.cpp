// Bounded rendering of JSON values for messages.
#include "core/json_text.h"

#include <nlohmann/json.hpp>

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

}  // namespace tpllama
