// Bounded text of a JSON value for error messages: a hostile file can nest a value a million
// levels deep, which a plain dump() would recurse through until the stack overflows.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tpllama {

constexpr size_t kMaxShownChars = 120;
constexpr int kMaxShownDepth = 3;

std::string clip(std::string s);
std::string describe_json(const nlohmann::json& v);

}  // namespace tpllama
