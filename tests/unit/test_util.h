// Helpers shared by the unit tests: where the shipped stories260K is, fresh temporary directories.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace tpllama::testing_util {

// models/stories260K (shipped with the project), or "" when it is missing.
inline std::string stories_dir() {
  const char* env = std::getenv("TPLLAMA_MODELS_DIR");
  std::string dir = std::string(env ? env : TPLLAMA_DEFAULT_MODELS_DIR) + "/stories260K";
  return std::filesystem::exists(dir + "/stories260K.bin") ? dir : "";
}

// A new empty directory under the system temp dir, removed by the caller's fixture if wanted.
inline std::string fresh_dir(const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() /
                            ("tpllama_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline size_t count_occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace tpllama::testing_util

#define TPLLAMA_REQUIRE_STORIES(dir)                                                   \
  const std::string dir = ::tpllama::testing_util::stories_dir();                     \
  if (dir.empty())                                                                    \
  GTEST_FAIL() << "models/stories260K/stories260K.bin is missing: it ships with the " \
                  "project (or set TPLLAMA_MODELS_DIR)"
