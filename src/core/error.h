// Errors and invariant checks. User mistakes throw tpllama::Error with the offending values in the
// message; broken invariants use TPLLAMA_CHECK, which adds file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tpllama {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Builds a message from streamable pieces: fail("n_heads (", n, ") not divisible by tp (", tp,
// ")").
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(detail::concat(std::forward<Args>(args)...));
}

}  // namespace tpllama

#define TPLLAMA_CHECK(cond, ...)                                                     \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::tpllama::fail("internal check failed: " #cond " at " __FILE__ ":", __LINE__, \
                      " " __VA_OPT__(, ) __VA_ARGS__);                               \
  } while (0)
