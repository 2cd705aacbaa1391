// Packed-panel GEMM (see gemm.h). Threads take runs of contiguous panels from a shared queue, so
// each streams its own weights and none waits long for a slower one. K goes in blocks of kDepth so
// a panel slice (32 × kDepth) stays in L1 while the tiles of x pass over it (gemm_panels has the
// two loop orders). The int8 kernels are in gemm_int8.cpp; they take items from the same queue.
#include "ops/cpu/gemm.h"

// GCC 12 warns inside its own AVX-512 headers (the self-initialised "undefined" vectors).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cpu/avx512.h"
#include "ops/cpu/gemm_int8.h"

namespace tpllama::ops::cpu {
namespace {

constexpr int kTileRows = 12;  // rows of x per register tile: 12 × 2 accumulators of 16 floats
constexpr int64_t kDepth =
    192;  // k per block: a 24 KiB f32 panel slice beside a 9 KiB tile of x in L1
constexpr int64_t kRowBlock = 240;  // rows of x per block at most (a multiple of kTileRows)
constexpr int64_t kBlockX = int64_t{1}
                            << 20;  // floats of x per block at most (4 MiB, in L2 and L3)
// How far ahead of its loads the one-row (decode) kernel prefetches, into L2: measured on a
// 128 MiB product, 4 KiB into L2 beat 2 KiB into L1 by 15% (bf16) and 3% (f32); 1 KiB and 8 KiB, or
// L1 at any distance, were slower.
constexpr int64_t kPrefetchBytes = 4096;
// A parallel region pays for itself above this many multiply-adds per thread, or this many weight
// elements per thread (decode is bound by reading them: each thread streams its own share).
constexpr int64_t kParallelMacs = int64_t{1} << 20;
constexpr int64_t kParallelWeights = int64_t{1} << 16;
constexpr int64_t kRunsPerThread = 6;

std::atomic<bool> g_force_portable{false};
std::atomic<bool> g_force_no_vnni{false};

}  // namespace

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

bool cpu_has_avx512_vnni() {
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  return has;
}

namespace {

// One tile of the product: out[0..rows) × [0..valid) (+)= x[0..rows) · panel[k0..k0+depth).
struct Tile {
  const float* x;  // first row, first k of the block: element (r, k) at x[r * ldx + k]
  int64_t ldx;
  const void* panel;  // first k of the block inside the panel
  int64_t depth;
  float* out;  // first row, first column of the panel
  int64_t ldo;
  int valid;        // columns of the panel that exist (the last panel may be short)
  bool accumulate;  // add to out (later k blocks) instead of overwriting it
  // Panel rows this tile asks for into L2, spread evenly over its k steps: its share of the next
  // slice, so the slice arrives from memory while the FMAs of this one run. Asking in a burst (one
  // row a step from the first step) measured 12% slower at 32 rows of x: it fills the line-fill
  // buffers the tile's own loads need. The one-row kernel prefetches its own way.
  const char* ahead = nullptr;
  int64_t ahead_rows = 0;
};

// bf16 weights widen to f32 without a shuffle: the 32-bit lane holding the pair of columns
// (2i, 2i + 1) is column 2i as f32 once shifted left by 16 and column 2i + 1 once its low half is
// cleared. So a bf16 tile accumulates even columns in its "lo" vectors and odd ones in its "hi"
// vectors, and store_tile_row puts them back in order.
template <bool kBf16>
__attribute__((target("avx512f,avx512bw"))) inline void load_panel_row(const void* panel, int64_t k,
                                                                       __m512& w0, __m512& w1) {
  if constexpr (kBf16) {
    const __m512i v = _mm512_load_si512(static_cast<const uint16_t*>(panel) + k * kPanelRows);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else {
    const float* p = static_cast<const float*>(panel) + k * kPanelRows;
    w0 = _mm512_load_ps(p);
    w1 = _mm512_load_ps(p + 16);
  }
}

template <bool kBf16>
__attribute__((target("avx512f,avx512bw"))) inline void store_tile_row(const Tile& t, int r,
                                                                       __m512 lo, __m512 hi) {
  if constexpr (kBf16) {  // even and odd columns (load_panel_row) back to columns 0-15 and 16-31
    const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i second =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    const __m512 even = lo;
    lo = _mm512_permutex2var_ps(even, first, hi);
    hi = _mm512_permutex2var_ps(even, second, hi);
  }
  avx512::store_tile_columns(t.out + r * t.ldo, t.valid, t.accumulate, lo, hi);
}

// One row of x (decode at batch 1): bound by reading the panel, so it prefetches ahead and keeps
// four accumulators (two k at a time) to stay clear of the FMA latency.
template <bool kBf16>
__attribute__((target("avx512f,avx512bw"))) void tile_avx512_row(const Tile& t) {
  __m512 lo0 = _mm512_setzero_ps(), hi0 = _mm512_setzero_ps(), lo1 = _mm512_setzero_ps(),
         hi1 = _mm512_setzero_ps();
  const char* prefetch = static_cast<const char*>(t.panel) + kPrefetchBytes;
  constexpr int64_t row_bytes = kPanelRows * (kBf16 ? 2 : 4);
  int64_t k = 0;
  for (; k + 1 < t.depth; k += 2) {
    _mm_prefetch(prefetch + k * row_bytes, _MM_HINT_T1);
    _mm_prefetch(prefetch + k * row_bytes + 64, _MM_HINT_T1);
    if constexpr (!kBf16) {
      _mm_prefetch(prefetch + k * row_bytes + 128, _MM_HINT_T1);
      _mm_prefetch(prefetch + k * row_bytes + 192, _MM_HINT_T1);
    }
    __m512 a0, a1, b0, b1;
    load_panel_row<kBf16>(t.panel, k, a0, a1);
    load_panel_row<kBf16>(t.panel, k + 1, b0, b1);
    const __m512 xa = _mm512_set1_ps(t.x[k]), xb = _mm512_set1_ps(t.x[k + 1]);
    lo0 = _mm512_fmadd_ps(xa, a0, lo0);
    hi0 = _mm512_fmadd_ps(xa, a1, hi0);
    lo1 = _mm512_fmadd_ps(xb, b0, lo1);
    hi1 = _mm512_fmadd_ps(xb, b1, hi1);
  }
  if (k < t.depth) {
    __m512 a0, a1;
    load_panel_row<kBf16>(t.panel, k, a0, a1);
    const __m512 xa = _mm512_set1_ps(t.x[k]);
    lo0 = _mm512_fmadd_ps(xa, a0, lo0);
    hi0 = _mm512_fmadd_ps(xa, a1, hi0);
  }
  store_tile_row<kBf16>(t, 0, _mm512_add_ps(lo0, lo1), _mm512_add_ps(hi0, hi1));
}

template <int kRows, bool kBf16>
__attribute__((target("avx512f,avx512bw"))) void tile_avx512(const Tile& t) {
  if constexpr (kRows == 1) {
    tile_avx512_row<kBf16>(t);
    return;
  }
  __m512 lo[kRows], hi[kRows];
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  constexpr int64_t row_bytes = kPanelRows * (kBf16 ? 2 : 4);
  const int64_t every =
      t.ahead_rows > 0 ? std::max<int64_t>(1, t.depth / t.ahead_rows) : t.depth + 1;
  const char* ahead = t.ahead;
  const char* ahead_end = t.ahead + t.ahead_rows * row_bytes;
  for (int64_t k = 0, next = 0; k < t.depth; ++k) {
    __m512 w0, w1;
    if (k == next && ahead < ahead_end) {
      _mm_prefetch(ahead, _MM_HINT_T1);
      if constexpr (!kBf16) _mm_prefetch(ahead + 64, _MM_HINT_T1);
      ahead += row_bytes;
      next += every;
    }
    load_panel_row<kBf16>(t.panel, k, w0, w1);
    for (int r = 0; r < kRows; ++r) {
      const __m512 b = _mm512_set1_ps(t.x[r * t.ldx + k]);
      lo[r] = _mm512_fmadd_ps(b, w0, lo[r]);
      hi[r] = _mm512_fmadd_ps(b, w1, hi[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) store_tile_row<kBf16>(t, r, lo[r], hi[r]);
}

template <bool kBf16>
void tile_portable(const Tile& t, int rows) {
  float acc[kTileRows][kPanelRows] = {};
  for (int64_t k = 0; k < t.depth; ++k) {
    float w[kPanelRows];
    for (int j = 0; j < kPanelRows; ++j)
      w[j] = kBf16 ? bf16_to_f32(static_cast<const uint16_t*>(t.panel)[k * kPanelRows + j])
                   : static_cast<const float*>(t.panel)[k * kPanelRows + j];
    for (int r = 0; r < rows; ++r) {
      const float b = t.x[r * t.ldx + k];
      for (int j = 0; j < kPanelRows; ++j) acc[r][j] += b * w[j];
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < t.valid; ++j)
      t.out[r * t.ldo + j] = (t.accumulate ? t.out[r * t.ldo + j] : 0.0f) + acc[r][j];
}

using TileFn = void (*)(const Tile&);

template <bool kBf16, int... kRows>
constexpr std::array<TileFn, sizeof...(kRows)> avx512_tiles(std::integer_sequence<int, kRows...>) {
  return {&tile_avx512<kRows + 1, kBf16>...};
}

void run_tile(const Tile& t, int rows, bool bf16, bool avx512) {
  using Rows = std::make_integer_sequence<int, kTileRows>;
  static constexpr std::array<std::array<TileFn, kTileRows>, 2> tiles = {
      avx512_tiles<false>(Rows{}), avx512_tiles<true>(Rows{})};
  if (avx512)
    tiles[bf16 ? 1 : 0][static_cast<size_t>(rows - 1)](t);
  else if (bf16)
    tile_portable<true>(t, rows);
  else
    tile_portable<false>(t, rows);
}

// The work of one or more products of the same x as a queue of (row block, product, run of
// panels) items, taken in order by whichever thread is free: a thread slowed by a neighbour
// (shared machines) or by its share of memory takes fewer, instead of the others waiting for it at
// the end of the product. A run of panels is contiguous in memory, so a thread still streams its
// weights front to back within it. Items go row block by row block, so a block of x, once copied,
// serves every product.
class PanelQueue {
 public:
  // panels[i] and run[i]: product i's panels and the panels a run of it holds.
  PanelQueue(int64_t row_blocks, const int64_t* panels, const int64_t* run, int count)
      : count_(count) {
    int64_t runs = 0;
    for (int i = 0; i < count; ++i) {
      panels_[i] = panels[i];
      run_[i] = run[i];
      first_run_[i] = runs;  // of the block's runs, product i's start here
      runs += (panels[i] + run[i] - 1) / run[i];
    }
    runs_per_block_ = runs;
    items_ = row_blocks * runs;
  }
  // The next item: its product, row block and panels [p_begin, p_end); false once all are taken.
  bool take(int& product, int64_t& block, int64_t& p_begin, int64_t& p_end) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= items_) return false;
    block = i / runs_per_block_;
    const int64_t r = i % runs_per_block_;
    product = count_ - 1;
    while (first_run_[product] > r) --product;
    p_begin = (r - first_run_[product]) * run_[product];
    p_end = std::min(panels_[product], p_begin + run_[product]);
    return true;
  }

 private:
  int count_;
  int64_t panels_[kMaxProducts], run_[kMaxProducts], first_run_[kMaxProducts];
  int64_t runs_per_block_ = 0, items_ = 0;
  std::atomic<int64_t> next_{0};
};

// The row blocks of a product: as many rows of x as fit kBlockX, so the block stays in L2 while
// each panel streams across its k blocks; balanced, so no block is a thin remainder. Up to one tile
// of rows (decode) is one block read in place.
struct RowBlocks {
  int64_t rows, count;
  RowBlocks(int64_t m, int64_t k) {
    if (m <= kTileRows) {
      rows = m;
      count = 1;
      return;
    }
    const int64_t most =
        std::clamp<int64_t>(kBlockX / ((k + 16) * kTileRows) * kTileRows, kTileRows, kRowBlock);
    const int64_t blocks = (m + most - 1) / most;
    rows = ((m + blocks - 1) / blocks + kTileRows - 1) / kTileRows * kTileRows;
    count = (m + rows - 1) / rows;
  }
};

// Takes items from the queue on the calling thread until none is left, streaming each panel once,
// front to back. Up to one tile of rows (decode) reads x in place. Taller products copy each block
// of x to rows 64 bytes longer than k (rows of x a power of two apart would otherwise fight over
// the same L1 sets; measured as fast as packing tiles k-major, at a tenth of the copying), once per
// block a thread works on whichever product the item is of, and sweep every panel slice over all
// of the block's tiles. Int8 products keep their own copy of the block, quantized (gemm_int8.h).
void gemm_panels(const float* x, int64_t m, int64_t k, const GemmProduct* products,
                 const RowBlocks& blocks, PanelQueue& queue, int8::Kernels kernels) {
  int product = 0;
  int64_t block = 0, p_begin = 0, p_end = 0;
  const int64_t ldx = k + 16;
  const bool avx512 = kernels.avx512;
  thread_local std::vector<float> rows_copy;
  thread_local int8::QuantizedRows quantized;
  if (m > kTileRows) rows_copy.resize(static_cast<size_t>(blocks.rows * ldx));
  int64_t copied = -1;  // the block rows_copy holds
  quantized.block = -1;
  while (queue.take(product, block, p_begin, p_end)) {
    const GemmProduct& pr = products[product];
    if (pr.dtype == DType::kI8) {
      const int64_t mb = block * blocks.rows;
      const int8::Item item{
          x, mb, std::min(blocks.rows, m - mb), k, pr.packed, pr.out, pr.n, p_begin, p_end, block};
      int8::run_item(item, m, kernels, quantized);
      continue;
    }
    const bool bf16 = pr.dtype == DType::kBF16;
    const size_t es = bf16 ? 2 : 4;
    const int64_t n = pr.n;
    const auto* base = static_cast<const char*>(pr.packed);
    auto panel_at = [&](int64_t p, int64_t k0) {
      return base + static_cast<size_t>((p * k + k0) * kPanelRows) * es;
    };
    auto valid = [&](int64_t p) {
      return static_cast<int>(std::min<int64_t>(kPanelRows, n - p * kPanelRows));
    };
    // Slices follow each other in memory (k blocks of a panel, then the next panel): the next one
    // starts where this one ends.
    auto next_slice = [&](int64_t p, int64_t k0) {
      return panel_at(p, k0) + static_cast<size_t>(std::min(kDepth, k - k0) * kPanelRows) * es;
    };
    if (m <= kTileRows) {
      for (int64_t p = p_begin; p < p_end; ++p)
        for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
          const Tile t{
              x + k0, k,        panel_at(p, k0), std::min(kDepth, k - k0), pr.out + p * kPanelRows,
              n,      valid(p), k0 > 0,          next_slice(p, k0),        kDepth};
          run_tile(t, static_cast<int>(m), bf16, avx512);
        }
      continue;
    }
    const int64_t mb = block * blocks.rows, rows = std::min(blocks.rows, m - mb);
    if (block != copied) {
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(rows_copy.data() + r * ldx, x + (mb + r) * k,
                    static_cast<size_t>(k) * sizeof(float));
      copied = block;
    }
    const int64_t n_tiles = (rows + kTileRows - 1) / kTileRows;
    for (int64_t p = p_begin; p < p_end; ++p)
      for (int64_t k0 = 0; k0 < k; k0 += kDepth)
        for (int64_t i = 0; i < n_tiles; ++i) {
          // Tiles of balanced height (16 rows: 8 + 8, not 12 + 4); they share the next slice's
          // prefetch.
          const int64_t r = rows * i / n_tiles, r_end = rows * (i + 1) / n_tiles,
                        ahead_from = kDepth * i / n_tiles;
          const Tile t{rows_copy.data() + r * ldx + k0,
                       ldx,
                       panel_at(p, k0),
                       std::min(kDepth, k - k0),
                       pr.out + (mb + r) * n + p * kPanelRows,
                       n,
                       valid(p),
                       k0 > 0,
                       next_slice(p, k0) + static_cast<size_t>(ahead_from * kPanelRows) * es,
                       kDepth * (i + 1) / n_tiles - ahead_from};
          run_tile(t, static_cast<int>(r_end - r), bf16, avx512);
        }
  }
}

}  // namespace

size_t packed_bytes(int64_t n, int64_t k, DType dtype) {
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  if (dtype == DType::kI8) return static_cast<size_t>(panels) * int8::panel_bytes(k);
  return static_cast<size_t>(panels * kPanelRows * k) * dtype_size(dtype);
}

void pack_weight(const float* w, int64_t n, int64_t k, DType dtype, void* dst) {
  TPLLAMA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI8,
                "CPU weights are f32, bf16 or int8, not ", dtype_name(dtype));
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  if (dtype == DType::kI8) {  // what an int8 checkpoint stores, then packed as one is
    std::vector<int8_t> q(static_cast<size_t>(n * k));
    std::vector<float> scales(static_cast<size_t>(n * int8_groups(k)));
    quantize_int8(w, n, k, q.data(), scales.data());
    pack_int8(q.data(), scales.data(), n, k, dst);
    return;
  }
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 20))
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < kPanelRows; ++j) {
        const int64_t row = p * kPanelRows + j;
        const float v = row < n ? w[row * k + kk] : 0.0f;
        const size_t at = static_cast<size_t>((p * k + kk) * kPanelRows + j);
        if (dtype == DType::kF32)
          static_cast<float*>(dst)[at] = v;
        else
          static_cast<uint16_t*>(dst)[at] = f32_to_bf16(v);
      }
    }
  }
}

void quantize_int8(const float* w, int64_t n, int64_t k, int8_t* q, float* scales) {
  const int64_t groups = int8_groups(k);
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 20))
  for (int64_t r = 0; r < n; ++r)
    int8::quantize_weight_row(w + r * k, k, q + r * k, scales + r * groups);
}

void pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k, void* dst) {
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows, groups = int8_groups(k);
  const size_t bytes = int8::panel_bytes(k);
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 20))
  for (int64_t p = 0; p < panels; ++p)
    int8::pack_panel(q + p * kPanelRows * k, k, scales + p * kPanelRows * groups, groups,
                     std::min(kPanelRows, n - p * kPanelRows), k,
                     static_cast<char*>(dst) + static_cast<size_t>(p) * bytes);
}

float packed_at(const void* packed, int64_t k, DType dtype, int64_t row, int64_t col) {
  if (dtype == DType::kI8) return int8::value_at(packed, k, row, col);
  const size_t at =
      static_cast<size_t>(((row / kPanelRows) * k + col) * kPanelRows + row % kPanelRows);
  return dtype == DType::kF32 ? static_cast<const float*>(packed)[at]
                              : bf16_to_f32(static_cast<const uint16_t*>(packed)[at]);
}

void gemm_multi(const float* x, int64_t m, int64_t k, const GemmProduct* products, int count,
                int threads) {
  TPLLAMA_CHECK(count >= 1 && count <= kMaxProducts, "gemm_multi: ", count, " products (1 to ",
                kMaxProducts, ")");
  if (m == 0) return;
  if (k == 0) {
    for (int i = 0; i < count; ++i)
      if (products[i].n > 0)
        std::memset(products[i].out, 0, static_cast<size_t>(m * products[i].n) * sizeof(float));
    return;
  }
  const int8::Kernels kernels = int8::kernels();
  int64_t panels[kMaxProducts], total_panels = 0, n_total = 0;
  for (int i = 0; i < count; ++i) {
    panels[i] = (products[i].n + kPanelRows - 1) / kPanelRows;
    total_panels += panels[i];
    n_total += products[i].n;
  }
  if (total_panels == 0) return;
  const int64_t macs = m * n_total * k;
  const int64_t worth =
      std::max<int64_t>({1, macs / kParallelMacs, n_total * k / kParallelWeights});
  const int use = static_cast<int>(std::min<int64_t>({std::max(1, threads), total_panels, worth}));
  const RowBlocks blocks(m, k);
  // One thread: each product's panels as one run. Several: about kRunsPerThread runs of panels per
  // thread and row block over all products, enough that the last one to finish leaves the others
  // little to wait for. Int8 panels at decode heights (one tile of rows, bound by reading the
  // weights) go twice as many to a run: they stream in about half the time, and each new run costs
  // its stream's start (measured on the 110m products at one row: 8-10% faster than runs of the
  // float size; the head, 2%).
  int64_t run[kMaxProducts];
  const int64_t panels_per_run = std::max<int64_t>(1, total_panels / (use * kRunsPerThread));
  for (int i = 0; i < count; ++i) {
    const bool streaming_int8 = products[i].dtype == DType::kI8 && m <= kTileRows;
    run[i] = use == 1 ? std::max<int64_t>(1, panels[i]) : panels_per_run * (streaming_int8 ? 2 : 1);
  }
  PanelQueue queue(blocks.count, panels, run, count);
  if (use == 1) return gemm_panels(x, m, k, products, blocks, queue, kernels);
#pragma omp parallel num_threads(use)
  gemm_panels(x, m, k, products, blocks, queue, kernels);
}

void gemm(float* out, const float* x, int64_t m, const void* packed, DType dtype, int64_t n,
          int64_t k, int threads) {
  const GemmProduct product{out, packed, dtype, n};
  gemm_multi(x, m, k, &product, 1, threads);
}

bool avx512_kernels() {
  return cpu_has_avx512() && !g_force_portable.load(std::memory_order_relaxed);
}

const char* gemm_kernel_name() {
  return avx512_kernels() ? "avx512" : "portable";
}

const char* int8_kernel_name(int64_t m) {
  const int8::Kernels kernels = int8::kernels();
  if (m < kInt8QuantizedRows || (kernels.avx512 && !kernels.vnni))
    return kernels.avx512 ? "avx512-widen" : "portable-widen";
  return kernels.vnni ? "avx512-vnni" : "portable-quantized";
}

bool int8_vnni_kernels() {
  return cpu_has_avx512_vnni() && !g_force_no_vnni.load(std::memory_order_relaxed);
}

void force_portable_gemm(bool on) {
  g_force_portable = on;
}
void force_no_vnni(bool on) {
  g_force_no_vnni = on;
}

}  // namespace tpllama::ops::cpu
