// ByteWriter / ByteReader: the wire format of the messages ranks exchange (step plans, sampled
// tokens, the requests and records of several replicas): little-endian PODs and length-prefixed
// arrays and strings, the same binary on every rank. A reader checks every length against the
// message, so a truncated message is an error, never a read past its end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace tpllama {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> bytes;
};

class ByteReader {
 public:
  // what: the message's name in errors ("plan message").
  ByteReader(const std::vector<uint8_t>& b, const char* what) : bytes_(b), what_(what) {}
  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    TPLLAMA_CHECK(pos_ + sizeof(T) <= bytes_.size(), what_, " truncated at byte ", pos_);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto n = get<uint64_t>();
    TPLLAMA_CHECK(n <= (bytes_.size() - pos_) / sizeof(T), what_, ": an array of ", n,
                  " elements overruns the message");
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  std::string get_string() {
    const auto n = get<uint64_t>();
    TPLLAMA_CHECK(n <= bytes_.size() - pos_, what_, ": a string of ", n,
                  " bytes overruns the message");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  size_t position() const { return pos_; }
  bool at_end() const { return pos_ == bytes_.size(); }

 private:
  const std::vector<uint8_t>& bytes_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace tpllama
