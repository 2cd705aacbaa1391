// The int8 panels of the CPU GEMM (layout in gemm.h): packing, element access, quantizing rows of
// x, and the work of one queue item of gemm_panels on an int8 product. Internal to ops/cpu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/cpu/gemm.h"

namespace tpllama::ops::cpu::int8 {

// Bytes of one packed panel of k columns.
size_t panel_bytes(int64_t k);
// Quantizes one row of a weight matrix (k wide) as gemm.h says: q (k), scales (one per group).
void quantize_weight_row(const float* row, int64_t k, int8_t* q, float* scales);
// Packs rows [0, rows) of quantized weights (rows ≤ 32, the rest of the panel zeros) into one
// panel: row j's q at q + j * ldq, its scale of group g at scales[j * lds + g].
void pack_panel(const int8_t* q, int64_t ldq, const float* scales, int64_t lds, int64_t rows,
                int64_t k, void* dst);
// q × scale of element (row, col).
float value_at(const void* packed, int64_t k, int64_t row, int64_t col);

// Rows of x quantized per group as the VNNI kernels read them: row r's k-th byte q + 128 at
// bytes[r * ld + k] (k padded to a multiple of 4 with 128, i.e. q = 0), its scale for group g at
// scales[r * groups + g]. `block` is the row block of gemm_panels they hold (-1: none yet).
struct QuantizedRows {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  int64_t ld = 0, groups = 0, block = -1;
};
// Quantizes rows [0, rows) of x (row r at x + r * ldx, k wide) into q, as gemm.h says. Its
// AVX-512 and portable forms give the same bytes, so the VNNI and portable kernels see the same x.
void quantize_rows(const float* x, int64_t rows, int64_t k, int64_t ldx, QuantizedRows& q);

// Which kernels run: the AVX-512 widening one, the VNNI one; otherwise the portable ones.
struct Kernels {
  bool avx512 = false;
  bool vnni = false;
};
Kernels kernels();

// One queue item: rows [row0, row0 + rows) of x (k wide, row-major) against panels [p_begin,
// p_end) of an int8 product; out is the product's (m, n) output.
struct Item {
  const float* x;
  int64_t row0, rows, k;
  const void* packed;
  float* out;
  int64_t n;
  int64_t p_begin, p_end;
  int64_t block;  // which row block of gemm_panels (QuantizedRows::block)
};
// Runs the item on the calling thread. Fewer than kInt8QuantizedRows rows in all (m) read x in
// place; more quantize the block once into q (the calling thread's own) for all panels it meets.
void run_item(const Item& item, int64_t m, Kernels kernels, QuantizedRows& q);

}  // namespace tpllama::ops::cpu::int8
