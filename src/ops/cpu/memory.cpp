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
// The mapping's length is kept in the page before the one handed out, so that the Buffer's release
// (a plain function pointer) can unmap it.
size_t page_size() {
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}
}  // namespace

void* map_zeroed(size_t nbytes) {
  const size_t page = page_size(), length = page + (nbytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("out of host memory mapping ", nbytes, " bytes: ", std::strerror(errno));
  *static_cast<size_t*>(p) = length;
  return static_cast<char*>(p) + page;
}

void unmap_zeroed(void* data) {
  if (data == nullptr) return;
  char* start = static_cast<char*>(data) - page_size();
  ::munmap(start, *reinterpret_cast<size_t*>(start));
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
