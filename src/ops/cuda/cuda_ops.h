// GPU implementations of the ops, called only from the ops/*.cpp dispatch after validation.
// Activations f32 or bf16 (all tensors of one op alike), weights f32 or bf16, norms' weights, RoPE
// tables and the KV pools f32; every tensor is device memory.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/device.h"
#include "ops/elementwise.h"
#include "ops/graph.h"
#include "ops/matmul.h"
#include "ops/roofline.h"
#include "ops/rows.h"
#include "ops/sampling.h"
#include "ops/weight.h"

namespace tpllama::ops::cuda {

size_t weight_bytes(int64_t rows, int64_t cols, DType dtype);
// w: host f32 (rows, cols); dst: device memory of weight_bytes.
Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst);
float weight_at(const Weight& w, int64_t row, int64_t col);
DType matmul_input_dtype(const Weight& w);
void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w);
void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps);
void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);
void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin);
void silu_mul(const DeviceContext& ctx, Tensor out, Tensor gate, Tensor up);
void add(const DeviceContext& ctx, Tensor x, Tensor y);
void add_bias(const DeviceContext& ctx, Tensor x, Tensor bias);
void attention(const DeviceContext& ctx, Tensor out, Tensor q, const KvBatch& kv,
               const AttentionShape& s);
// Whether attention takes prefill runs of this head size and cache dtype on tensor cores (a bf16
// cache, head_dim 64 or 128, sm_80+, and not turned off below).
bool tensor_core_attention(int head_dim, DType kv);
// Test hook: false sends every prefill run to the fp32 run kernel (as
// TPLLAMA_TENSOR_CORE_ATTENTION=0 in the environment does from the start). Returns the previous
// choice.
bool use_tensor_core_attention(bool on);
// How many pieces attention of `tokens` decode tokens (no prefill runs) splits each context into on
// this GPU: more than 1 when too few tokens × heads fill it and the longest context is long.
int decode_attention_splits(int64_t tokens, int n_heads, int max_ctx);
void kv_write(const DeviceContext& ctx, Tensor key_pool, Tensor value_pool, Tensor k, Tensor v,
              Tensor rows);
void gather_rows(const DeviceContext& ctx, Tensor out, Tensor x, Tensor rows);
void fill_columns(const DeviceContext& ctx, Tensor x, int64_t col_begin, float value);
void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f);
void logit_sums(const DeviceContext& ctx, Tensor sums, Tensor logits, Tensor rows, Tensor max,
                Tensor chosen);
Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype,
                           const UniformFill& f, void* dst);
size_t scratch_bytes(int64_t max_rows, int64_t max_width);
std::vector<int32_t> sample_rows(const DeviceContext& ctx, Tensor logits, int n,
                                 const std::vector<SampleRow>& rows);
size_t sampling_scratch_bytes(int64_t rows, int64_t cols);
Buffer allocate(size_t nbytes);
void zero(const DeviceContext& ctx, Tensor t);
void upload(const DeviceContext& ctx, Tensor dst, const void* host);
void download(const DeviceContext& ctx, void* host, Tensor src);
void copy(const DeviceContext& ctx, Tensor dst, Tensor src);
void synchronize(const DeviceContext& ctx);
uint64_t memory_available(const DeviceContext& ctx);
// CUDA graphs of the context's stream (ops::Graph holds the cudaGraphExec_t).
void begin_capture(const DeviceContext& ctx);
void* end_capture(const DeviceContext& ctx);
void abort_capture(const DeviceContext& ctx);
void launch_graph(const DeviceContext& ctx, void* exec);
void destroy_graph(void* exec);
// Bytes/s of a device-to-device copy of `bytes` (read + written), and cuBLAS FLOP/s on an
// (n × n) · (n × n)ᵀ product in dtype with fp32 compute: best of several timed runs.
double measure_copy_bandwidth(const DeviceContext& ctx, size_t bytes);
double measure_gemm_flops(const DeviceContext& ctx, DType dtype, int64_t n);
void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits);
void edit_logits(const DeviceContext& ctx, Tensor logits, Tensor cells, Tensor params);
void mask_logits(const DeviceContext& ctx, Tensor logits, Tensor rows, Tensor words,
                 int64_t first_token);

}  // namespace tpllama::ops::cuda
