// Where the tests find the models that ship with the project (models/, or $TPLLAMA_MODELS_DIR),
// and what a test says when stories260K is missing.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tpllama::shipped {

inline std::string models_dir() {
  const char* env = std::getenv("TPLLAMA_MODELS_DIR");
  return env != nullptr ? env : TPLLAMA_DEFAULT_MODELS_DIR;
}

// models/stories260K, or "" when its checkpoint is missing.
inline std::string stories_dir() {
  const std::string dir = models_dir() + "/stories260K";
  return std::filesystem::exists(dir + "/stories260K.bin") ? dir : "";
}

inline constexpr char kStoriesMissing[] =
    "models/stories260K/stories260K.bin is missing: it ships with the project (or set "
    "TPLLAMA_MODELS_DIR)";

}  // namespace tpllama::shipped
