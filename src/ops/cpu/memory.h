// CPU bodies of the memory ops: zeroing a buffer, gathering rows, filling columns, and the host's
// available memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace tpllama::ops::cpu {

// From this size on, map_pages offers the kernel's transparent huge pages.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// nbytes of zeroed host memory whose pages the kernel supplies as they are first written (an
// anonymous mapping, page-aligned; from kHugePageBytes on, aligned to a huge page and advised to
// use them). reserve false: the memory is not reserved (MAP_NORESERVE), so a KV pool sized for the
// full context costs the memory its sequences reach, not its size, and no time to set up. Freed
// with unmap_pages.
void* map_pages(size_t nbytes, bool reserve);
void unmap_pages(void* data);
// nbytes at data set to 0 by up to `threads` threads (a large buffer gets its pages here).
void zero(void* data, size_t nbytes, int threads);
// out row i ← x row rows[i]; rows are checked.
void gather_rows(Tensor out, Tensor x, Tensor rows);
// x[r][c] = value for c >= col_begin (f32).
void fill_columns(Tensor x, int64_t col_begin, float value);
// MemAvailable of /proc/meminfo in bytes (0 when unknown).
uint64_t memory_available();

}  // namespace tpllama::ops::cpu
