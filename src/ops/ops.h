// Device-free op API: each op validates shapes and dtypes once, then dispatches on the tensors'
// device. All activations are row-major (tokens, features).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/sampling_params.h"
#include "core/tensor.h"

namespace tpllama::ops {

// Whether this build has the GPU path.
bool cuda_built();
// GPUs this process can use (0 in a build without CUDA, or without a driver or device).
int gpu_count();
// GPU `gpu`'s UUID as hex: ranks that see one GPU under different numbers (per-rank
// CUDA_VISIBLE_DEVICES) can tell it from ranks sharing one.
std::string gpu_uuid(int gpu);

// Owns what a rank's DeviceContext points at: on a GPU its stream, cuBLAS handle and scratch.
class DeviceRuntime {
 public:
  // device kCpu: `threads` CPU threads. kCuda: GPU number `gpu` of this process.
  DeviceRuntime(Device device, int gpu, int threads);
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;
  const DeviceContext& context() const { return ctx_; }
  // "cpu (N threads)" or "cuda:G (name, total memory)".
  std::string describe() const;

 private:
  struct Gpu;
  std::unique_ptr<Gpu> gpu_;
  DeviceContext ctx_;
  int gpu_index_ = -1;
};

// A recording of the work a context's device was given between begin_capture and end_capture,
// replayed by one launch (a CUDA graph). Only where graphs_supported(ctx): on a GPU.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  bool empty() const { return exec_ == nullptr; }

 private:
  friend Graph end_capture(const DeviceContext& ctx);
  friend void launch(const DeviceContext& ctx, const Graph& graph);
  void* exec_ = nullptr;  // cudaGraphExec_t
};
bool graphs_supported(const DeviceContext& ctx);
// Starts recording the context's stream: the ops that follow are recorded, not run. A failure
// inside must be followed by abort_capture.
void begin_capture(const DeviceContext& ctx);
Graph end_capture(const DeviceContext& ctx);
// Ends a recording that failed part-way, discarding it and the error it left.
void abort_capture(const DeviceContext& ctx);
void launch(const DeviceContext& ctx, const Graph& graph);

// The roofline of a device, measured (tpllama bench). Read bandwidth in bytes/s: on the CPU a
// streaming read over 1 GiB on the context's threads; on a GPU a device-to-device copy of 2 GiB,
// counting the bytes read and written. GEMM FLOP/s: the matmul this build runs (the project's
// CPU GEMM: the best of squares of 1024, 1536 and 2048; cuBLAS: 8192) with weights held as dtype.
double measure_read_bandwidth(const DeviceContext& ctx);
double measure_gemm_flops(const DeviceContext& ctx, DType dtype);

// A weight matrix (rows N, cols K) in the layout the device's matmul reads (on the CPU: panels of
// 32 rows, k-major, in f32 or bf16; see ops/cpu/gemm.h). Made once at load by pack_weight; the
// memory belongs to whoever passed `dst`.
struct Weight {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  size_t nbytes = 0;
  bool empty() const { return data == nullptr; }
};

// Bytes pack_weight needs for a (rows, cols) matrix held as dtype (f32 or bf16).
size_t weight_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype);
// Packs w (rows, cols), f32 row-major as stored in checkpoints, into dst (weight_bytes, 64-byte
// aligned) as dtype.
Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst);
// Element (row, col) of a packed weight, as f32.
float weight_at(const Weight& w, int64_t row, int64_t col);

// Seeded uniform values, for benchmark weights of shapes that have no files (--random-weights):
// element (r, c) of a slice starting at (row0, col0) of a tensor full_cols wide is
// fma(scale, u, offset), u = (splitmix64(stream + (row0 + r) · full_cols + col0 + c) >> 11) · 2^-52 − 1
// (uniform in [-1, 1)); rows from `present` on are 0 (the padding of the last vocab shard). The
// same bits on every device, so a GPU draws its weights where they live and holds the CPU's model.
struct UniformFill {
  uint64_t stream = 0;
  int64_t full_cols = 0;
  int64_t row0 = 0;
  int64_t col0 = 0;
  int64_t present = 0;
  float scale = 1;
  float offset = 0;
};
uint64_t splitmix64(uint64_t z);
// out (rows, cols) or (rows), f32, filled as above.
void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f);
// A (rows, cols) weight filled as above, held as dtype in dst (weight_bytes): what pack_weight
// would make of the same values, drawn on the device.
Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype, const UniformFill& f,
                           void* dst);

// out (M, N) = x (M, K) · wᵀ.
void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w);
// Several products of one x (the Q, K and V projections; gate and up): outs[i] = x · ws[i]ᵀ, as
// matmul each. On the CPU one pass over the threads takes all of them (one hand-off, not one per
// product); on a GPU, one GEMM each.
struct MatmulOut {
  Tensor out;
  const Weight* w;
};
void matmuls(const DeviceContext& ctx, Tensor x, std::initializer_list<MatmulOut> products);
// The dtype of x that matmul with w reads as it is (f32 on the CPU; the weight's on a GPU, whose
// GEMM takes both inputs alike): an op that writes a GEMM's input writes it in this dtype, and
// no conversion runs in between.
DType matmul_input_dtype(const DeviceContext& ctx, const Weight& w);

// out (M, D) = x / sqrt(mean(x²) + eps) * weight (D). out may alias x. On a GPU out may have
// another dtype than x (a GEMM's input).
void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps);

// Rotate-half RoPE in place on x (M, n_heads*head_dim) with per-token cos/sin (M, head_dim/2).
void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim);

// out (M, D): row m = table[tokens[m] - vocab_begin] when this rank holds that row, else zeros
// (vocab-parallel embedding; the TP all-reduce completes it).
void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin);

// out (M, H) = silu(gate) * up. out may alias gate; on a GPU it may have another dtype.
void silu_mul(const DeviceContext& ctx, Tensor out, Tensor gate, Tensor up);

// x += y, same shape.
void add(const DeviceContext& ctx, Tensor x, Tensor y);

// Where the tokens of one step find their keys and values in the paged cache. The layer's key and
// value pools hold one position per row (block * block_size + offset) of n_kv_heads*head_dim
// values; the step's sequences each have a block table, and every token names its sequence and
// how many positions it sees. All tensors live on the op's device.
struct KvBatch {
  Tensor keys;    // (pool_rows, kv_dim) f32
  Tensor values;  // (pool_rows, kv_dim) f32
  Tensor tables;  // (n_seqs, max_blocks) i32: block ids of each sequence of the step
  Tensor seq;     // (tokens) i32: the token's row of tables
  Tensor n_ctx;   // (tokens) i32: attend to positions [0, n_ctx): causal, the token's own included
  int max_ctx = 0;  // the largest n_ctx: lets a GPU split long contexts along the sequence
  // Optional: the tokens as maximal runs of one sequence at consecutive positions, (n_runs, 2) i32
  // [first token, length], and the longest: a GPU reads each key once per several queries of a
  // run (prefill).
  Tensor runs;
  int max_run = 0;
};

struct AttentionShape {
  int n_heads = 0;     // query heads on this rank
  int n_kv_heads = 0;  // kv heads on this rank
  int head_dim = 0;
  float scale = 0;     // usually 1/sqrt(head_dim)
  int block_size = 0;  // positions per KV block
};

// Grouped-query attention of each token over its own sequence's cache.
// q, out: (M, n_heads*head_dim); kv.seq and kv.n_ctx: (M). On a GPU out may have another dtype
// than q (a GEMM's input).
void attention(const DeviceContext& ctx, Tensor out, Tensor q, const KvBatch& kv, const AttentionShape& shape);

// pool row rows[m] ← src row m, for the key and value pools alike: this step's keys and values
// (M, kv_dim) appended to the cache. rows: (M) i32.
void kv_write(const DeviceContext& ctx, Tensor key_pool, Tensor value_pool, Tensor k, Tensor v, Tensor rows);

// out row i ← x row rows[i]. out (R, D), x (M, D), rows (R) i32.
void gather_rows(const DeviceContext& ctx, Tensor out, Tensor x, Tensor rows);

// x[r][c] = value for every row and c >= col_begin (f32): the padding columns of a vocab shard.
void fill_columns(const DeviceContext& ctx, Tensor x, int64_t col_begin, float value);

// One row to sample: its settings (temperature > 0) and the uniform in [0, 1) of its draw.
struct SampleRow {
  SamplingParams params;
  double uniform = 0;
};
// The token ops/cpu/sampling.h's sample_with_uniform draws from each row of logits (rows, cols)
// f32, over its first n columns, with rows[r]: on a GPU sorted and drawn there, so only the ids
// reach the host. Fails naming the row when its logits have no finite maximum.
std::vector<int32_t> sample_rows(const DeviceContext& ctx, Tensor logits, int n, const std::vector<SampleRow>& rows);

// Bytes of ctx.scratch the ops need for activations of up to max_rows rows and max_width columns
// (0 on the CPU). A model whose steps are larger than the runtime's scratch brings its own.
size_t scratch_bytes(const DeviceContext& ctx, int64_t max_rows, int64_t max_width);
// ... and sample_rows for up to rows × cols logits.
size_t sampling_scratch_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols);

// Memory on the context's device: aligned host memory on the CPU, cudaMalloc on a GPU (never
// managed memory). Allocated at start-up, never per step.
Buffer allocate(const DeviceContext& ctx, size_t nbytes);
// Every byte of t set to 0, in stream order. On the CPU the rank's threads share the writing, and
// fresh memory gets its pages here: the KV pool is zeroed at start, so on a machine that cannot
// back it the out-of-memory killer ends the rank then, right after the memory check's log, not in
// the middle of a run with output half written.
void zero(const DeviceContext& ctx, Tensor t);
// dst (on the context's device) ← dst.nbytes() bytes of host memory, in stream order; host may be
// reused once the call returns.
void upload(const DeviceContext& ctx, Tensor dst, const void* host);
// host ← src.nbytes() bytes of src (on the context's device); returns once they have arrived.
void download(const DeviceContext& ctx, void* host, Tensor src);
// Waits until the context's device has finished its queued work (a no-op on the CPU).
void synchronize(const DeviceContext& ctx);
// Bytes free on the context's device: MemAvailable on the CPU (0 when unknown), free device
// memory on a GPU (the start-up memory check and the KV cache size).
uint64_t memory_available(const DeviceContext& ctx);

// index[r], value[r] = the largest logit of row r and its column (ties to the lowest column), over
// logits (rows, cols) f32.
void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits);

// The log-softmax pieces of n rows of the logits, without moving the rows off the device: for
// i < n, sums[i] = Σ_c exp(logits[rows[i]][c] − max[i]) (accumulated in double) and sums[n + i] =
// logits[rows[i]][chosen[i]] where 0 <= chosen[i] < cols, else 0. rows, chosen (n) i32; max (n)
// f32; sums (2n) f32.
void logit_sums(const DeviceContext& ctx, Tensor sums, Tensor logits, Tensor rows, Tensor max, Tensor chosen);

}  // namespace tpllama::ops
