// The duplicate-id index of request intake: every request id read, in constant memory per id, for
// runs of millions of requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpllama {

// Open-addressing set of 64-bit id hashes with the line each id first appeared on: 12 bytes a
// slot at most half full, so a 10-million-line input costs about 240 MB rather than gigabytes of
// strings. Two distinct ids collide with probability about n²/2^65.
class IdIndex {
 public:
  // Records key at line; returns 0 when new, else the line it was first recorded at.
  uint32_t insert(const std::string& key, uint32_t line);

 private:
  void grow();
  std::vector<uint64_t> hashes_;  // 0 = empty
  std::vector<uint32_t> lines_;
  size_t size_ = 0;
};

}  // namespace tpllama
