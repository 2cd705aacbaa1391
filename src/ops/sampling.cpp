// Argmax, draws and log-softmax pieces of logit rows: validate, then dispatch.
#include "ops/sampling.h"

#include <vector>

#include "core/error.h"
#include "ops/cpu/sampling.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

int argmax(const float* logits, int n) {
  return cpu::argmax(logits, n);
}

std::vector<Candidate> candidate_set(const float* logits, int n, const SamplingParams& p) {
  return cpu::candidate_set(logits, n, p);
}

int sample_with_uniform(const float* logits, int n, const SamplingParams& p, double u) {
  return cpu::sample_with_uniform(logits, n, p, u);
}

std::vector<int32_t> sample_rows(const DeviceContext& ctx, Tensor logits, int n,
                                 const std::vector<SampleRow>& rows) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32 &&
                    logits.size(0) == static_cast<int64_t>(rows.size()),
                "sample_rows: logits ", logits.shape_string(), " for ", rows.size(), " rows");
  TPLLAMA_CHECK(n >= 1 && n <= logits.size(1), "sample_rows: ", n, " of ", logits.size(1),
                " columns");
  for (const SampleRow& r : rows)
    TPLLAMA_CHECK(r.params.temperature > 0 && r.uniform >= 0 && r.uniform < 1,
                  "sample_rows: temperature ", r.params.temperature, " uniform ", r.uniform);
  if (on_gpu("sample_rows", ctx, {&logits})) TPLLAMA_GPU(sample_rows(ctx, logits, n, rows));
  return cpu::sample_rows(logits, n, rows);
}

size_t sampling_scratch_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols) {
  if (on_gpu("sampling_scratch_bytes", ctx, {})) TPLLAMA_GPU(sampling_scratch_bytes(rows, cols));
  return 0;
}

void edit_logits(const DeviceContext& ctx, Tensor logits, Tensor cells, Tensor params) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "edit_logits: logits ",
                logits.shape_string());
  const int64_t n = cells.ndim() == 2 ? cells.size(0) : -1;
  TPLLAMA_CHECK(cells.dtype() == DType::kI32 && n >= 0 && cells.size(1) == 2 &&
                    params.dtype() == DType::kF32 && params.ndim() == 2 && params.size(0) == n &&
                    params.size(1) == 3,
                "edit_logits: cells ", cells.shape_string(), " params ", params.shape_string());
  if (n == 0) return;
  if (on_gpu("edit_logits", ctx, {&logits, &cells, &params}))
    TPLLAMA_GPU(edit_logits(ctx, logits, cells, params));
  cpu::edit_logits(logits, cells, params);
}

void mask_logits(const DeviceContext& ctx, Tensor logits, Tensor rows, Tensor words,
                 int64_t first_token) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32 &&
                    rows.dtype() == DType::kI32 && words.dtype() == DType::kI32 &&
                    words.ndim() == 2 && words.size(0) == rows.numel() && first_token >= 0,
                "mask_logits: logits ", logits.shape_string(), " rows ", rows.shape_string(),
                " words ", words.shape_string());
  if (rows.numel() == 0) return;
  if (on_gpu("mask_logits", ctx, {&logits, &rows, &words}))
    TPLLAMA_GPU(mask_logits(ctx, logits, rows, words, first_token));
  cpu::mask_logits(logits, rows, words, first_token);
}

void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "argmax_rows: logits ",
                logits.shape_string());
  TPLLAMA_CHECK(
      index.dtype() == DType::kI32 && index.ndim() == 1 && index.size(0) == logits.size(0),
      "argmax_rows: index ", index.shape_string());
  TPLLAMA_CHECK(
      value.dtype() == DType::kF32 && value.ndim() == 1 && value.size(0) == logits.size(0),
      "argmax_rows: value ", value.shape_string());
  if (on_gpu("argmax_rows", ctx, {&index, &value, &logits}))
    TPLLAMA_GPU(argmax_rows(ctx, index, value, logits));
  cpu::argmax_rows(index, value, logits);
}

void logit_sums(const DeviceContext& ctx, Tensor sums, Tensor logits, Tensor rows, Tensor max,
                Tensor chosen) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "logit_sums: logits ",
                logits.shape_string());
  const int64_t n = rows.numel();
  TPLLAMA_CHECK(rows.dtype() == DType::kI32 && chosen.dtype() == DType::kI32 &&
                    chosen.numel() == n && max.dtype() == DType::kF32 && max.numel() == n &&
                    sums.dtype() == DType::kF32 && sums.numel() == 2 * n,
                "logit_sums: rows ", rows.shape_string(), " chosen ", chosen.shape_string(),
                " max ", max.shape_string(), " sums ", sums.shape_string());
  if (n == 0) return;
  if (on_gpu("logit_sums", ctx, {&sums, &logits, &rows, &max, &chosen}))
    TPLLAMA_GPU(logit_sums(ctx, sums, logits, rows, max, chosen));
  cpu::logit_sums(sums, logits, rows, max, chosen);
}

}  // namespace tpllama::ops
