// Row gathers and column fills: validate, then dispatch.
#include "ops/rows.h"

#include "core/error.h"
#include "ops/cpu/memory.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

void gather_rows(const DeviceContext& ctx, Tensor out, Tensor x, Tensor rows) {
  TPLLAMA_CHECK(x.ndim() == 2 && rows.ndim() == 1 && rows.dtype() == DType::kI32, "gather_rows: x ",
                x.shape_string(), " rows ", rows.shape_string());
  require_2d("gather_rows", out, "out", rows.size(0), x.size(1));
  TPLLAMA_CHECK(out.dtype() == x.dtype(), "gather_rows: out ", dtype_name(out.dtype()), " vs x ",
                dtype_name(x.dtype()));
  if (on_gpu("gather_rows", ctx, {&out, &x, &rows})) TPLLAMA_GPU(gather_rows(ctx, out, x, rows));
  cpu::gather_rows(out, x, rows);
}

void fill_columns(const DeviceContext& ctx, Tensor x, int64_t col_begin, float value) {
  TPLLAMA_CHECK(x.ndim() == 2 && col_begin >= 0, "fill_columns: x ", x.shape_string(),
                " from column ", col_begin);
  require_f32("fill_columns", x, "x");
  if (col_begin >= x.size(1) || x.size(0) == 0) return;
  if (on_gpu("fill_columns", ctx, {&x})) TPLLAMA_GPU(fill_columns(ctx, x, col_begin, value));
  cpu::fill_columns(x, col_begin, value);
}

}  // namespace tpllama::ops
