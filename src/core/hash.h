// FNV-1a, 64 bits: a cheap, stable hash for fingerprints and ids that must not change between
// builds or machines (not for security).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tpllama {

class Fnv1a {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ULL;
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  uint64_t value() const { return h_; }
  std::string hex() const {  // 16 hex digits
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace tpllama
