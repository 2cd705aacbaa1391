// The host's memory ops.
#include "ops/cpu/memory.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"

namespace tpllama::ops::cpu {

namespace {
// The mapping's start and length are kept in the page before the one handed out, so that the
// Buffer's release (a plain function pointer) can unmap it.
struct MappingHeader {
  void* start;
  size_t length;
};

size_t page_size() {
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

// Mappings of kHugePageBytes and up are placed on a huge-page boundary and offered transparent
// huge pages (where the kernel has them: THP "madvise" or "always"). A first write then faults in
// 2 MiB, not 4 KiB: on a VM whose page faults cost ~10 us, 8 prompts of 128 tokens (110m) spent
// 0.15-0.2 s of a 0.46 s prefill writing their first KV pages, 12 ms on huge pages; large weights
// are read with fewer TLB misses; and the memory a probe frees is not left in 4 KiB pieces that a
// later huge fault must compact.
void* map_pages(size_t nbytes, bool reserve) {
  const size_t page = page_size(), body = (nbytes + page - 1) / page * page;
  const bool huge = body >= kHugePageBytes;
  const size_t length = page + body + (huge ? kHugePageBytes : 0);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (reserve ? 0 : MAP_NORESERVE), -1, 0);
  if (p == MAP_FAILED)
    fail("out of host memory mapping ", nbytes, " bytes: ", std::strerror(errno));
  auto* data = static_cast<char*>(p) + page;
  if (huge) {
    const auto misalign = reinterpret_cast<uintptr_t>(data) % kHugePageBytes;
    if (misalign != 0) data += kHugePageBytes - misalign;
    ::madvise(data, body, MADV_HUGEPAGE);  // a refusal (no THP) leaves small pages: still correct
  }
  *reinterpret_cast<MappingHeader*>(data - page) = {p, length};
  if (reserve) populate(data, body);  // memory for use now (weights, activations): its pages too
  return data;
}

void populate(void* data, size_t nbytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14's value, where the headers predate it
#endif
  if (nbytes == 0) return;
  const size_t page = page_size();
  const auto begin = reinterpret_cast<uintptr_t>(data) / page * page,
             end = reinterpret_cast<uintptr_t>(data) + nbytes;
  // A refusal (an older kernel: EINVAL) leaves the pages to their first write, as before.
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
}

void unmap_pages(void* data) {
  if (data == nullptr) return;
  const MappingHeader h =
      *reinterpret_cast<const MappingHeader*>(static_cast<char*>(data) - page_size());
  ::munmap(h.start, h.length);
}

void zero(void* data, size_t nbytes, int threads) {
  auto* bytes = static_cast<char*>(data);
  const int64_t n = static_cast<int64_t>(nbytes), chunk = int64_t{1} << 21;
#pragma omp parallel for schedule(static) num_threads(std::max(1, threads)) if (n >= 4 * chunk)
  for (int64_t at = 0; at < n; at += chunk)
    std::memset(bytes + at, 0, static_cast<size_t>(std::min(chunk, n - at)));
}

void gather_rows(Tensor out, Tensor x, Tensor rows) {
  const size_t row_bytes = static_cast<size_t>(x.size(1)) * dtype_size(x.dtype());
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const int64_t r = rows.as<int32_t>()[i];
    TPLLAMA_CHECK(r >= 0 && r < x.size(0), "gather_rows: row ", r, " of ", x.size(0));
    std::memcpy(static_cast<char*>(out.data()) + i * row_bytes,
                static_cast<const char*>(x.data()) + r * row_bytes, row_bytes);
  }
}

void fill_columns(Tensor x, int64_t col_begin, float value) {
  for (int64_t r = 0; r < x.size(0); ++r)
    std::fill(x.as<float>() + r * x.size(1) + col_begin, x.as<float>() + (r + 1) * x.size(1),
              value);
}

uint64_t memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace tpllama::ops::cpu
