// Row moves on the device: gathering the rows whose logits are wanted, and filling a vocab
// shard's padding columns.
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"

namespace tpllama::ops {

// out row i ← x row rows[i]. out (R, D), x (M, D), rows (R) i32.
void gather_rows(const DeviceContext& ctx, Tensor out, Tensor x, Tensor rows);

// x[r][c] = value for every row and c >= col_begin (f32): the padding columns of a vocab shard.
void fill_columns(const DeviceContext& ctx, Tensor x, int64_t col_begin, float value);

}  // namespace tpllama::ops
