// Shape and dtype validation for every op, then dispatch on the context's device. The CPU takes
// f32 activations; the GPU f32 or bf16 (one dtype per op). A build without CUDA names the op that
// was asked to run on a GPU.
#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/machine_limits.h"
#include "ops/cpu/sampling.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_runtime.h"
#endif

namespace tpllama::ops {
namespace {

void require_f32(const char* op, const Tensor& t, const char* what) {
  TPLLAMA_CHECK(t.dtype() == DType::kF32, op, ": ", what, " must be f32, got ", dtype_name(t.dtype()));
}

void require_2d(const char* op, const Tensor& t, const char* what, int64_t rows, int64_t cols) {
  TPLLAMA_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, op, ": ", what, " has shape ",
                t.shape_string(), ", expected [", rows, ", ", cols, "]");
}

// True when the op runs on the GPU; then every tensor must live there too.
bool on_gpu(const char* op, const DeviceContext& ctx, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    TPLLAMA_CHECK(t->device() == ctx.device, op, ": a tensor on ", device_name(t->device()), " given to an op on ",
                  device_name(ctx.device));
  if (ctx.device == Device::kCpu) return false;
#ifndef TPLLAMA_HAVE_CUDA
  fail("op ", op, " was asked to run on ", device_name(ctx.device),
       " but this build has no CUDA (configure with -DTPLLAMA_CUDA=ON where nvcc is installed)");
#endif
  return true;
}

// A layer's key and value pools: one dtype, f32 or bf16.
void require_kv_pools(const char* op, const Tensor& keys, const Tensor& values) {
  TPLLAMA_CHECK((keys.dtype() == DType::kF32 || keys.dtype() == DType::kBF16) && values.dtype() == keys.dtype(), op,
                ": KV pools of ", dtype_name(keys.dtype()), " and ", dtype_name(values.dtype()));
}

// The activations of a CPU op are f32.
void require_cpu_f32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) require_f32(op, *t, "an activation on the CPU");
}

}  // namespace

#ifdef TPLLAMA_HAVE_CUDA
#define TPLLAMA_GPU(call) return cuda::call
#else
#define TPLLAMA_GPU(call) fail("unreachable: no CUDA in this build")
#endif

bool cuda_built() {
#ifdef TPLLAMA_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int gpu_count() {
#ifdef TPLLAMA_HAVE_CUDA
  return tpllama::cuda::device_count();
#else
  return 0;
#endif
}

std::string gpu_uuid(int gpu) {
#ifdef TPLLAMA_HAVE_CUDA
  return tpllama::cuda::device_uuid(gpu);
#else
  fail("GPU ", gpu, " asked for, but this build has no CUDA");
#endif
}

#ifdef TPLLAMA_HAVE_CUDA
struct DeviceRuntime::Gpu {
  tpllama::cuda::CudaRuntime runtime;
  explicit Gpu(int gpu) : runtime(gpu) {}
};
#else
struct DeviceRuntime::Gpu {};
#endif

DeviceRuntime::DeviceRuntime(Device device, int gpu, int threads) {
  ctx_.device = device;
  ctx_.threads = std::max(1, threads);
  if (device == Device::kCpu) return;
  on_gpu("DeviceRuntime", ctx_, {});  // names the missing CUDA in a CPU-only build
#ifdef TPLLAMA_HAVE_CUDA
  gpu_ = std::make_unique<Gpu>(gpu);
  ctx_ = gpu_->runtime.context();
  ctx_.threads = std::max(1, threads);
  gpu_index_ = gpu;
#endif
}

DeviceRuntime::~DeviceRuntime() = default;

std::string DeviceRuntime::describe() const {
  if (ctx_.device == Device::kCpu) return "cpu (" + std::to_string(ctx_.threads) + " threads)";
#ifdef TPLLAMA_HAVE_CUDA
  return "cuda:" + std::to_string(gpu_index_) + " (" + gpu_->runtime.describe() + ")";
#else
  return "cuda";
#endif
}

Graph::~Graph() {
#ifdef TPLLAMA_HAVE_CUDA
  if (exec_ != nullptr) cuda::destroy_graph(exec_);
#endif
}

Graph::Graph(Graph&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    Graph dropped(std::move(*this));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

bool graphs_supported(const DeviceContext& ctx) { return ctx.device == Device::kCuda && cuda_built(); }

void begin_capture(const DeviceContext& ctx) {
  TPLLAMA_CHECK(graphs_supported(ctx), "graph capture on ", device_name(ctx.device));
  on_gpu("begin_capture", ctx, {});
#ifdef TPLLAMA_HAVE_CUDA
  cuda::begin_capture(ctx);
#endif
}

Graph end_capture(const DeviceContext& ctx) {
  Graph g;
  on_gpu("end_capture", ctx, {});
#ifdef TPLLAMA_HAVE_CUDA
  g.exec_ = cuda::end_capture(ctx);
#endif
  return g;
}

void abort_capture(const DeviceContext& ctx) {
#ifdef TPLLAMA_HAVE_CUDA
  if (ctx.device == Device::kCuda) cuda::abort_capture(ctx);
#endif
}

void launch(const DeviceContext& ctx, const Graph& graph) {
  TPLLAMA_CHECK(!graph.empty(), "launch of an empty graph");
  on_gpu("launch", ctx, {});
#ifdef TPLLAMA_HAVE_CUDA
  cuda::launch_graph(ctx, graph.exec_);
#endif
}

double measure_read_bandwidth(const DeviceContext& ctx) {
  if (on_gpu("measure_read_bandwidth", ctx, {})) TPLLAMA_GPU(measure_copy_bandwidth(ctx, size_t{2} << 30));
  return cpu::measure_read_bandwidth(ctx.threads, size_t{1} << 30);
}

double measure_gemm_flops(const DeviceContext& ctx, DType dtype) {
  if (on_gpu("measure_gemm_flops", ctx, {})) TPLLAMA_GPU(measure_gemm_flops(ctx, dtype, 8192));
  // The best over three large squares: at 2048 the operands (16 MiB each in f32) outgrow the caches
  // and the GEMM runs 6-9% below its rate at 1024-1536, which a model's own products then beat.
  double best = 0;
  for (int64_t n : {1024, 1536, 2048}) best = std::max(best, cpu::measure_gemm_flops(ctx.threads, dtype, n));
  return best;
}

size_t weight_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype) {
  if (on_gpu("weight_bytes", ctx, {})) TPLLAMA_GPU(weight_bytes(rows, cols, dtype));
  return cpu::packed_bytes(rows, cols, dtype);
}

Weight pack_weight(const DeviceContext& ctx, Tensor w, DType dtype, void* dst) {
  TPLLAMA_CHECK(w.ndim() == 2, "pack_weight: w ", w.shape_string());
  require_f32("pack_weight", w, "w");
  TPLLAMA_CHECK(w.device() == Device::kCpu, "pack_weight: w must be host memory (as read from the checkpoint)");
  TPLLAMA_CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "pack_weight: destination not 64-byte aligned");
  if (on_gpu("pack_weight", ctx, {})) TPLLAMA_GPU(pack_weight(ctx, w, dtype, dst));
  cpu::pack_weight(w.as<float>(), w.size(0), w.size(1), dtype, dst);
  return Weight{dst, w.size(0), w.size(1), dtype, Device::kCpu, cpu::packed_bytes(w.size(0), w.size(1), dtype)};
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill_uniform(const DeviceContext& ctx, Tensor out, const UniformFill& f) {
  TPLLAMA_CHECK(out.ndim() == 1 || out.ndim() == 2, "fill_uniform: out ", out.shape_string());
  require_f32("fill_uniform", out, "out");
  const int64_t rows = out.size(0), cols = out.ndim() == 2 ? out.size(1) : 1;
  if (on_gpu("fill_uniform", ctx, {&out})) TPLLAMA_GPU(fill_uniform(ctx, out, f));
  cpu::fill_uniform(out.as<float>(), rows, cols, f);
}

Weight fill_weight_uniform(const DeviceContext& ctx, int64_t rows, int64_t cols, DType dtype, const UniformFill& f,
                           void* dst) {
  TPLLAMA_CHECK(rows > 0 && cols > 0, "fill_weight_uniform: [", rows, ", ", cols, "]");
  if (on_gpu("fill_weight_uniform", ctx, {})) TPLLAMA_GPU(fill_weight_uniform(ctx, rows, cols, dtype, f, dst));
  std::vector<float> values(static_cast<size_t>(rows * cols));
  cpu::fill_uniform(values.data(), rows, cols, f);
  return pack_weight(ctx, Tensor(values.data(), DType::kF32, {rows, cols}), dtype, dst);
}

float weight_at(const Weight& w, int64_t row, int64_t col) {
  TPLLAMA_CHECK(row >= 0 && row < w.rows && col >= 0 && col < w.cols, "weight_at(", row, ", ", col, ") of [",
                w.rows, ", ", w.cols, "]");
  DeviceContext where;
  where.device = w.device;
  if (on_gpu("weight_at", where, {})) TPLLAMA_GPU(weight_at(w, row, col));
  return cpu::packed_at(w.data, w.cols, w.dtype, row, col);
}

namespace {

void require_matmul(const char* op, const DeviceContext& ctx, const Tensor& out, const Tensor& x, const Weight& w) {
  TPLLAMA_CHECK(x.ndim() == 2 && !w.empty(), op, ": x ", x.shape_string(), " w [", w.rows, ", ", w.cols, "]");
  require_2d(op, out, "out", x.size(0), w.rows);
  TPLLAMA_CHECK(x.size(1) == w.cols, op, ": x ", x.shape_string(), " vs w [", w.rows, ", ", w.cols, "]");
  TPLLAMA_CHECK(w.device == ctx.device, op, ": weight on ", device_name(w.device), ", op on ", device_name(ctx.device));
}

}  // namespace

void matmul(const DeviceContext& ctx, Tensor out, Tensor x, const Weight& w) {
  require_matmul("matmul", ctx, out, x, w);
  if (on_gpu("matmul", ctx, {&out, &x})) TPLLAMA_GPU(matmul(ctx, out, x, w));
  require_cpu_f32("matmul", {&out, &x});
  cpu::gemm(out.as<float>(), x.as<float>(), x.size(0), w.data, w.dtype, w.rows, w.cols, ctx.threads);
}

void matmuls(const DeviceContext& ctx, Tensor x, std::initializer_list<MatmulOut> products) {
  TPLLAMA_CHECK(products.size() >= 1 && products.size() <= static_cast<size_t>(cpu::kMaxProducts), "matmuls: ",
                products.size(), " products (1 to ", cpu::kMaxProducts, ")");
  bool gpu = false;
  for (const MatmulOut& p : products) {
    TPLLAMA_CHECK(p.w != nullptr, "matmuls: a product without a weight");
    require_matmul("matmuls", ctx, p.out, x, *p.w);
    gpu = on_gpu("matmuls", ctx, {&p.out, &x});  // every tensor on the op's device, checked before any runs
  }
  if (gpu) {
    for (const MatmulOut& p : products) matmul(ctx, p.out, x, *p.w);
    return;
  }
  cpu::GemmProduct cpu_products[cpu::kMaxProducts];
  int count = 0;
  for (const MatmulOut& p : products) {
    require_cpu_f32("matmuls", {&p.out, &x});
    cpu_products[count++] = {p.out.as<float>(), p.w->data, p.w->dtype, p.w->rows};
  }
  cpu::gemm_multi(x.as<float>(), x.size(0), x.size(1), cpu_products, count, ctx.threads);
}

DType matmul_input_dtype(const DeviceContext& ctx, const Weight& w) {
  if (on_gpu("matmul_input_dtype", ctx, {})) TPLLAMA_GPU(matmul_input_dtype(w));
  return DType::kF32;
}

void rms_norm(const DeviceContext& ctx, Tensor out, Tensor x, Tensor weight, float eps) {
  TPLLAMA_CHECK(x.ndim() == 2 && weight.ndim() == 1 && weight.size(0) == x.size(1), "rms_norm: x ",
                x.shape_string(), " weight ", weight.shape_string());
  require_2d("rms_norm", out, "out", x.size(0), x.size(1));
  require_f32("rms_norm", weight, "weight");
  TPLLAMA_CHECK(out.dtype() == x.dtype() || out.data() != x.data(), "rms_norm: out aliases x with another dtype");
  if (on_gpu("rms_norm", ctx, {&out, &x, &weight})) TPLLAMA_GPU(rms_norm(ctx, out, x, weight, eps));
  require_cpu_f32("rms_norm", {&out, &x});
  cpu::rms_norm(out, x, weight, eps);
}

void rope(const DeviceContext& ctx, Tensor x, Tensor cos, Tensor sin, int n_heads, int head_dim) {
  require_2d("rope", x, "x", x.size(0), static_cast<int64_t>(n_heads) * head_dim);
  require_2d("rope", cos, "cos", x.size(0), head_dim / 2);
  require_2d("rope", sin, "sin", x.size(0), head_dim / 2);
  require_f32("rope", cos, "cos");
  require_f32("rope", sin, "sin");
  if (on_gpu("rope", ctx, {&x, &cos, &sin})) TPLLAMA_GPU(rope(ctx, x, cos, sin, n_heads, head_dim));
  require_cpu_f32("rope", {&x});
  cpu::rope(x, cos, sin, n_heads, head_dim);
}

void embedding(const DeviceContext& ctx, Tensor out, Tensor table, Tensor tokens, int vocab_begin) {
  TPLLAMA_CHECK(tokens.dtype() == DType::kI32 && tokens.ndim() == 1, "embedding: tokens ",
                tokens.shape_string());
  TPLLAMA_CHECK(table.ndim() == 2, "embedding: table ", table.shape_string());
  require_2d("embedding", out, "out", tokens.size(0), table.size(1));
  if (on_gpu("embedding", ctx, {&out, &table, &tokens})) TPLLAMA_GPU(embedding(ctx, out, table, tokens, vocab_begin));
  require_cpu_f32("embedding", {&out, &table});
  cpu::embedding(out, table, tokens, vocab_begin);
}

void silu_mul(const DeviceContext& ctx, Tensor out, Tensor gate, Tensor up) {
  TPLLAMA_CHECK(gate.numel() == up.numel() && gate.dtype() == up.dtype() && out.numel() == gate.numel(),
                "silu_mul: out ", out.shape_string(), " gate ", gate.shape_string(), " up ", up.shape_string());
  TPLLAMA_CHECK(out.dtype() == gate.dtype() || out.data() != gate.data(), "silu_mul: out aliases gate with another dtype");
  if (on_gpu("silu_mul", ctx, {&out, &gate, &up})) TPLLAMA_GPU(silu_mul(ctx, out, gate, up));
  require_cpu_f32("silu_mul", {&out, &gate, &up});
  if (out.data() != gate.data()) std::memcpy(out.data(), gate.data(), gate.nbytes());
  cpu::silu_mul(out, up);
}

void add(const DeviceContext& ctx, Tensor x, Tensor y) {
  TPLLAMA_CHECK(x.numel() == y.numel() && x.dtype() == y.dtype(), "add: x ", x.shape_string(), " y ",
                y.shape_string());
  if (on_gpu("add", ctx, {&x, &y})) TPLLAMA_GPU(add(ctx, x, y));
  require_cpu_f32("add", {&x, &y});
  cpu::add(x, y);
}

void attention(const DeviceContext& ctx, Tensor out, Tensor q, const KvBatch& kv, const AttentionShape& s) {
  TPLLAMA_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "attention: ", s.n_heads,
                " heads over ", s.n_kv_heads, " kv heads");
  const int64_t tokens = q.size(0);
  require_2d("attention", q, "q", tokens, static_cast<int64_t>(s.n_heads) * s.head_dim);
  require_2d("attention", out, "out", tokens, q.size(1));
  TPLLAMA_CHECK(s.block_size > 0, "attention: block size ", s.block_size);
  const int64_t kv_dim = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
  require_2d("attention", kv.keys, "key pool", kv.keys.size(0), kv_dim);
  require_2d("attention", kv.values, "value pool", kv.keys.size(0), kv_dim);
  require_kv_pools("attention", kv.keys, kv.values);
  TPLLAMA_CHECK(kv.tables.ndim() == 2 && kv.tables.dtype() == DType::kI32, "attention: tables ", kv.tables.shape_string());
  for (const Tensor* t : {&kv.seq, &kv.n_ctx})
    TPLLAMA_CHECK(t->ndim() == 1 && t->size(0) == tokens && t->dtype() == DType::kI32, "attention: per-token ",
                  t->shape_string(), " for ", tokens, " tokens");
  if (!kv.runs.empty())
    TPLLAMA_CHECK(kv.runs.ndim() == 2 && kv.runs.size(1) == 2 && kv.runs.dtype() == DType::kI32 &&
                      kv.runs.size(0) <= tokens && kv.max_run >= 1 && kv.max_run <= tokens,
                  "attention: runs ", kv.runs.shape_string(), " longest ", kv.max_run, " for ", tokens, " tokens");
  if (on_gpu("attention", ctx, {&out, &q, &kv.keys, &kv.values, &kv.tables, &kv.seq, &kv.n_ctx}))
    TPLLAMA_GPU(attention(ctx, out, q, kv, s));
  require_cpu_f32("attention", {&out, &q});
  // The CPU kernel takes one view per token; the tables are host memory here.
  const int64_t max_blocks = kv.tables.size(1), pool_rows = kv.keys.size(0);
  std::vector<KvView> views(static_cast<size_t>(tokens));
  std::vector<int64_t> checked(static_cast<size_t>(kv.tables.size(0)), 0);  // table entries checked, per row
  for (int64_t m = 0; m < tokens; ++m) {
    const int32_t seq = kv.seq.as<int32_t>()[m], n_ctx = kv.n_ctx.as<int32_t>()[m];
    TPLLAMA_CHECK(seq >= 0 && seq < kv.tables.size(0) && n_ctx > 0 && n_ctx <= max_blocks * s.block_size,
                  "attention: token ", m, " of sequence row ", seq, " sees ", n_ctx, " positions");
    const int32_t* blocks = kv.tables.as<int32_t>() + seq * max_blocks;
    int64_t& done = checked[static_cast<size_t>(seq)];  // a prefill chunk's tokens share their table
    for (; done < (n_ctx + s.block_size - 1) / s.block_size; ++done)
      TPLLAMA_CHECK(blocks[done] >= 0 && (blocks[done] + int64_t{1}) * s.block_size <= pool_rows, "attention: block ",
                    blocks[done], " outside the pool of ", pool_rows, " rows");
    views[static_cast<size_t>(m)] = {kv.keys.data(), kv.values.data(), blocks, n_ctx, kv.keys.dtype()};
  }
  cpu::attention(out, q, views, s);
}

void kv_write(const DeviceContext& ctx, Tensor key_pool, Tensor value_pool, Tensor k, Tensor v, Tensor rows) {
  TPLLAMA_CHECK(k.ndim() == 2 && key_pool.ndim() == 2 && key_pool.size(1) == k.size(1), "kv_write: pool ",
                key_pool.shape_string(), " k ", k.shape_string());
  require_2d("kv_write", value_pool, "value pool", key_pool.size(0), key_pool.size(1));
  require_2d("kv_write", v, "v", k.size(0), k.size(1));
  TPLLAMA_CHECK(rows.ndim() == 1 && rows.size(0) == k.size(0) && rows.dtype() == DType::kI32, "kv_write: rows ",
                rows.shape_string(), " for ", k.size(0), " tokens");
  require_f32("kv_write", k, "k");
  require_f32("kv_write", v, "v");
  require_kv_pools("kv_write", key_pool, value_pool);
  if (on_gpu("kv_write", ctx, {&key_pool, &value_pool, &k, &v, &rows}))
    TPLLAMA_GPU(kv_write(ctx, key_pool, value_pool, k, v, rows));
  const int64_t width = k.size(1);
  const bool bf16 = key_pool.dtype() == DType::kBF16;
  for (int64_t m = 0; m < k.size(0); ++m) {
    const int64_t r = rows.as<int32_t>()[m];
    TPLLAMA_CHECK(r >= 0 && r < key_pool.size(0), "kv_write: row ", r, " outside the pool of ", key_pool.size(0));
    for (auto [pool, src] : {std::pair{key_pool, k}, std::pair{value_pool, v}}) {
      const float* from = src.as<float>() + m * width;
      if (bf16) {
        uint16_t* to = pool.as<uint16_t>() + r * width;
        for (int64_t i = 0; i < width; ++i) to[i] = f32_to_bf16(from[i]);
      } else {
        std::memcpy(pool.as<float>() + r * width, from, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
}

void gather_rows(const DeviceContext& ctx, Tensor out, Tensor x, Tensor rows) {
  TPLLAMA_CHECK(x.ndim() == 2 && rows.ndim() == 1 && rows.dtype() == DType::kI32, "gather_rows: x ",
                x.shape_string(), " rows ", rows.shape_string());
  require_2d("gather_rows", out, "out", rows.size(0), x.size(1));
  TPLLAMA_CHECK(out.dtype() == x.dtype(), "gather_rows: out ", dtype_name(out.dtype()), " vs x ", dtype_name(x.dtype()));
  if (on_gpu("gather_rows", ctx, {&out, &x, &rows})) TPLLAMA_GPU(gather_rows(ctx, out, x, rows));
  const size_t row_bytes = static_cast<size_t>(x.size(1)) * dtype_size(x.dtype());
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const int64_t r = rows.as<int32_t>()[i];
    TPLLAMA_CHECK(r >= 0 && r < x.size(0), "gather_rows: row ", r, " of ", x.size(0));
    std::memcpy(static_cast<char*>(out.data()) + i * row_bytes, static_cast<const char*>(x.data()) + r * row_bytes,
                row_bytes);
  }
}

void fill_columns(const DeviceContext& ctx, Tensor x, int64_t col_begin, float value) {
  TPLLAMA_CHECK(x.ndim() == 2 && col_begin >= 0, "fill_columns: x ", x.shape_string(), " from column ", col_begin);
  require_f32("fill_columns", x, "x");
  if (col_begin >= x.size(1) || x.size(0) == 0) return;
  if (on_gpu("fill_columns", ctx, {&x})) TPLLAMA_GPU(fill_columns(ctx, x, col_begin, value));
  for (int64_t r = 0; r < x.size(0); ++r)
    std::fill(x.as<float>() + r * x.size(1) + col_begin, x.as<float>() + (r + 1) * x.size(1), value);
}

std::vector<int32_t> sample_rows(const DeviceContext& ctx, Tensor logits, int n, const std::vector<SampleRow>& rows) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32 && logits.size(0) == static_cast<int64_t>(rows.size()),
                "sample_rows: logits ", logits.shape_string(), " for ", rows.size(), " rows");
  TPLLAMA_CHECK(n >= 1 && n <= logits.size(1), "sample_rows: ", n, " of ", logits.size(1), " columns");
  for (const SampleRow& r : rows)
    TPLLAMA_CHECK(r.params.temperature > 0 && r.uniform >= 0 && r.uniform < 1, "sample_rows: temperature ",
                  r.params.temperature, " uniform ", r.uniform);
  if (on_gpu("sample_rows", ctx, {&logits})) TPLLAMA_GPU(sample_rows(ctx, logits, n, rows));
  std::vector<int32_t> tokens(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    tokens[r] = cpu::sample_with_uniform(logits.as<float>() + static_cast<int64_t>(r) * logits.size(1), n,
                                         rows[r].params, rows[r].uniform);
  return tokens;
}

size_t sampling_scratch_bytes(const DeviceContext& ctx, int64_t rows, int64_t cols) {
  if (on_gpu("sampling_scratch_bytes", ctx, {})) TPLLAMA_GPU(sampling_scratch_bytes(rows, cols));
  return 0;
}

size_t scratch_bytes(const DeviceContext& ctx, int64_t max_rows, int64_t max_width) {
  if (on_gpu("scratch_bytes", ctx, {})) TPLLAMA_GPU(scratch_bytes(max_rows, max_width));
  return 0;
}

Buffer allocate(const DeviceContext& ctx, size_t nbytes) {
  if (on_gpu("allocate", ctx, {})) TPLLAMA_GPU(allocate(nbytes));
  return Buffer(nbytes);
}

void zero(const DeviceContext& ctx, Tensor t) {
  if (on_gpu("zero", ctx, {&t})) TPLLAMA_GPU(zero(ctx, t));
  auto* bytes = static_cast<char*>(t.data());
  const int64_t n = static_cast<int64_t>(t.nbytes()), chunk = int64_t{1} << 21;
#pragma omp parallel for schedule(static) num_threads(std::max(1, ctx.threads)) if (n >= 4 * chunk)
  for (int64_t at = 0; at < n; at += chunk) std::memset(bytes + at, 0, static_cast<size_t>(std::min(chunk, n - at)));
}

void upload(const DeviceContext& ctx, Tensor dst, const void* host) {
  if (on_gpu("upload", ctx, {&dst})) TPLLAMA_GPU(upload(ctx, dst, host));
  if (dst.data() != host) std::memcpy(dst.data(), host, dst.nbytes());
}

void download(const DeviceContext& ctx, void* host, Tensor src) {
  if (on_gpu("download", ctx, {&src})) TPLLAMA_GPU(download(ctx, host, src));
  if (src.data() != host) std::memcpy(host, src.data(), src.nbytes());
}

void synchronize(const DeviceContext& ctx) {
  if (on_gpu("synchronize", ctx, {})) TPLLAMA_GPU(synchronize(ctx));
}

uint64_t memory_available(const DeviceContext& ctx) {
  if (on_gpu("memory_available", ctx, {})) TPLLAMA_GPU(memory_available(ctx));
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

void argmax_rows(const DeviceContext& ctx, Tensor index, Tensor value, Tensor logits) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "argmax_rows: logits ", logits.shape_string());
  TPLLAMA_CHECK(index.dtype() == DType::kI32 && index.ndim() == 1 && index.size(0) == logits.size(0),
                "argmax_rows: index ", index.shape_string());
  TPLLAMA_CHECK(value.dtype() == DType::kF32 && value.ndim() == 1 && value.size(0) == logits.size(0),
                "argmax_rows: value ", value.shape_string());
  if (on_gpu("argmax_rows", ctx, {&index, &value, &logits})) TPLLAMA_GPU(argmax_rows(ctx, index, value, logits));
  cpu::argmax_rows(index, value, logits);
}

void logit_sums(const DeviceContext& ctx, Tensor sums, Tensor logits, Tensor rows, Tensor max, Tensor chosen) {
  TPLLAMA_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "logit_sums: logits ", logits.shape_string());
  const int64_t n = rows.numel();
  TPLLAMA_CHECK(rows.dtype() == DType::kI32 && chosen.dtype() == DType::kI32 && chosen.numel() == n &&
                    max.dtype() == DType::kF32 && max.numel() == n && sums.dtype() == DType::kF32 &&
                    sums.numel() == 2 * n,
                "logit_sums: rows ", rows.shape_string(), " chosen ", chosen.shape_string(), " max ",
                max.shape_string(), " sums ", sums.shape_string());
  if (n == 0) return;
  if (on_gpu("logit_sums", ctx, {&sums, &logits, &rows, &max, &chosen}))
    TPLLAMA_GPU(logit_sums(ctx, sums, logits, rows, max, chosen));
  const int64_t cols = logits.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows.as<int32_t>()[i];
    TPLLAMA_CHECK(r >= 0 && r < logits.size(0), "logit_sums: row ", r, " of ", logits.size(0));
    const float* row = logits.as<float>() + r * cols;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(row[c]) - max.as<float>()[i]);
    const int32_t at = chosen.as<int32_t>()[i];
    sums.as<float>()[i] = static_cast<float>(sum);
    sums.as<float>()[n + i] = at >= 0 && at < cols ? row[at] : 0.0f;
  }
}

}  // namespace tpllama::ops
