// Reading tokenizer.json fields so that every refusal names the file, the component and the field:
// `where` is "<path>: pre_tokenizer.pretokenizers[1]" and grows as the parsers descend.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tpllama::hf {

using Json = nlohmann::json;

inline std::string json_kind(const Json& j) {
  return j.type_name();
}

inline const Json& member(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object()) fail(where, ": expected an object, got ", json_kind(j));
  auto it = j.find(key);
  if (it == j.end()) fail(where, ": missing field '", key, "'");
  return *it;
}

// The component's "type" string.
inline std::string type_of(const Json& j, const std::string& where) {
  const Json& type = member(j, "type", where);
  if (!type.is_string()) fail(where, ": field 'type' is ", json_kind(type), ", expected a string");
  return type.get<std::string>();
}

[[noreturn]] inline void refuse_type(const std::string& where, const std::string& type,
                                     const char* supported) {
  fail(where, " type '", type, "' is not supported (supported: ", supported, ")");
}

inline bool opt_bool(const Json& j, const char* key, bool fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    fail(where, ": field '", key, "' is ", json_kind(*it), ", expected a bool");
  return it->get<bool>();
}

inline std::string req_string(const Json& j, const char* key, const std::string& where) {
  const Json& v = member(j, key, where);
  if (!v.is_string()) fail(where, ": field '", key, "' is ", json_kind(v), ", expected a string");
  return v.get<std::string>();
}

inline std::string opt_string(const Json& j, const char* key, const std::string& fallback,
                              const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return req_string(j, key, where);
}

inline long long req_int(const Json& j, const char* key, const std::string& where) {
  const Json& v = member(j, key, where);
  if (!v.is_number_integer()) {
    fail(where, ": field '", key, "' is ", json_kind(v), ", expected an integer");
  }
  return v.get<long long>();
}

inline long long opt_int(const Json& j, const char* key, long long fallback,
                         const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return req_int(j, key, where);
}

inline const Json& req_array(const Json& j, const char* key, const std::string& where) {
  const Json& v = member(j, key, where);
  if (!v.is_array()) fail(where, ": field '", key, "' is ", json_kind(v), ", expected an array");
  return v;
}

}  // namespace tpllama::hf
