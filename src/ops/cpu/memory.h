// CPU bodies of the memory ops: zeroing a buffer, gathering rows, filling columns, and the host's
// available memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace tpllama::ops::cpu {

// From this size on, map_pages offers the kernel's transparent huge pages.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// nbytes of zeroed host memory (an anonymous mapping, page-aligned; from kHugePageBytes on, aligned
// to a huge page and advised to use them). reserve true: reserved, and its pages populated now (it
// is for use at once: weights, activations). reserve false: not reserved (MAP_NORESERVE), its pages
// supplied as they are first written or populated, so a KV pool sized for the full context costs
// the memory its sequences reach, not its size, and no time to set up. Freed with unmap_pages.
void* map_pages(size_t nbytes, bool reserve);
void unmap_pages(void* data);
// Has the kernel supply the pages of [data, data + nbytes) now, in one call (MADV_POPULATE_WRITE,
// Linux 5.14 on), rather than a fault at each page's first write: on this project's VM a fault
// costs ~10 us, and 576 MiB took 1.1-1.7 s written page by page against 0.035-0.1 s populated.
// Where the kernel cannot, nothing happens (the pages still come at first write). Contents are
// left as they are.
void populate(void* data, size_t nbytes);
// nbytes at data set to 0 by up to `threads` threads (a large buffer gets its pages here).
void zero(void* data, size_t nbytes, int threads);
// out row i ← x row rows[i]; rows are checked.
void gather_rows(Tensor out, Tensor x, Tensor rows);
// x[r][c] = value for c >= col_begin (f32).
void fill_columns(Tensor x, int64_t col_begin, float value);
// MemAvailable of /proc/meminfo in bytes (0 when unknown).
uint64_t memory_available();

}  // namespace tpllama::ops::cpu
