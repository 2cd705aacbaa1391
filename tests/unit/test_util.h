// Helpers shared by the unit tests: where the shipped stories260K is, fresh temporary directories.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "llama_reference.h"
#include "shipped_models.h"
#include "temp_files.h"

namespace tpllama::testing_util {

using shipped::stories_dir;

// A two-layer model of toy size (dim 16, 4 heads over 2 kv heads, 40 tokens) for the reference
// writer: files to damage, or to load in a test.
inline reference::Config tiny_reference_config() {
  reference::Config c{};
  c.dim = 16;
  c.hidden_dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 40;
  c.max_seq_len = 64;
  return c;
}

// A new empty directory under the system temp dir, removed when the test process exits
// (temp_files.h).
inline std::string fresh_dir(const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() /
                            ("tpllama_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return test_files::remove_at_exit(p.string());
}

// The message of the Error f throws, "" when it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline size_t count_occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

// tests/data, from the build's definition (a path the compiler's __FILE__ may make relative).
inline const std::filesystem::path kTestData = TPLLAMA_TEST_DATA_DIR;

// A whole file; throws naming it when it cannot be read.
inline std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tpllama::testing_util

#define TPLLAMA_REQUIRE_STORIES(dir)                         \
  const std::string dir = ::tpllama::shipped::stories_dir(); \
  if (dir.empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing
