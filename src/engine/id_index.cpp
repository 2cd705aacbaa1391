// IdIndex: open addressing over FNV-1a hashes of the ids.
#include "engine/id_index.h"

#include <algorithm>
#include <utility>

#include "core/hash.h"

namespace tpllama {
namespace {

uint64_t fnv1a64(const std::string& s) {
  Fnv1a fnv;
  fnv.add(s);
  uint64_t h = fnv.value();
  h ^= h >> 33;  // finalizer: spreads FNV's low bits over the table index
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

}  // namespace

uint32_t IdIndex::insert(const std::string& key, uint32_t line) {
  if (2 * (size_ + 1) > hashes_.size()) grow();
  const uint64_t h = fnv1a64(key);
  const size_t mask = hashes_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    if (hashes_[i] == 0) {
      hashes_[i] = h;
      lines_[i] = line;
      ++size_;
      return 0;
    }
    if (hashes_[i] == h) return lines_[i];
  }
}

void IdIndex::grow() {
  std::vector<uint64_t> old_hashes = std::move(hashes_);
  std::vector<uint32_t> old_lines = std::move(lines_);
  const size_t capacity = std::max<size_t>(1024, old_hashes.size() * 2);
  hashes_.assign(capacity, 0);
  lines_.assign(capacity, 0);
  const size_t mask = capacity - 1;
  for (size_t j = 0; j < old_hashes.size(); ++j) {
    if (old_hashes[j] == 0) continue;
    size_t i = old_hashes[j] & mask;
    while (hashes_[i] != 0) i = (i + 1) & mask;
    hashes_[i] = old_hashes[j];
    lines_[i] = old_lines[j];
  }
}

}  // namespace tpllama
