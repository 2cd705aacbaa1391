// Every GPU op against the CPU op on seeded random inputs (the reference side), over a matrix of
// shapes: odd sizes, GQA ratios, block boundaries, long contexts; f32 and bf16 activations with a
// tolerance each; guard regions around every GPU output catch out-of-bounds writes; each case
// checks that the candidate's output really is device memory. Skips, saying so, without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/kv_cache.h"
#include "ops/attention.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_runtime.h"
#include "ops/device.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/rows.h"
#include "ops/sampling.h"
#include "ops/weight.h"

namespace tpllama {
namespace {

using cuda::CudaRuntime;
using cuda::DeviceBuffer;

constexpr int64_t kGuard = 256;         // elements of guard on each side of a GPU output
constexpr uint16_t kSentinel = 0x7fc1;  // a quiet-NaN pattern in both f32 halves and bf16

// The current GPU's streaming multiprocessors, asked of the CUDA runtime here.
int multiprocessor_count() {
  int device = 0, n = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return n;
}

class GpuOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0)
      GTEST_SKIP() << "no GPU visible: the GPU op parity tests need one (label gpu)";
    runtime_ = std::make_unique<CudaRuntime>(0);
    gpu_ = runtime_->context();
  }
  DType act() const { return GetParam(); }
  double tolerance() const { return act() == DType::kF32 ? 2e-4 : 3e-2; }

  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng_);
    // bf16 activations: the reference sees the values the GPU holds.
    if (act() == DType::kBF16)
      for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  }

  // A device tensor of `act()` (or f32 / i32 when asked) holding v, with guard regions.
  struct Device {
    DeviceBuffer buffer;
    Tensor tensor;
    size_t elements = 0;
    DType dtype = DType::kF32;
  };
  Device upload(const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dtype) {
    Device d;
    d.dtype = dtype;
    d.elements = v.size();
    const size_t es = dtype_size(dtype);
    d.buffer = DeviceBuffer((v.size() + 2 * kGuard) * es);
    std::vector<uint16_t> guard((kGuard * es) / 2, kSentinel);
    d.buffer.upload(guard.data(), kGuard * es, 0);
    d.buffer.upload(guard.data(), kGuard * es, (kGuard + v.size()) * es);
    if (dtype == DType::kBF16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
      d.buffer.upload(h.data(), h.size() * 2, kGuard * es);
    } else {
      d.buffer.upload(v.data(), v.size() * 4, kGuard * es);  // f32 or i32 bit patterns
    }
    d.tensor = Tensor(static_cast<char*>(d.buffer.data()) + kGuard * es, dtype, shape,
                      tpllama::Device::kCuda);
    return d;
  }
  Device upload(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return upload(v, shape, act());
  }
  Device upload_i32(const std::vector<int32_t>& v) {
    std::vector<float> bits(v.size());
    std::memcpy(bits.data(), v.data(), v.size() * 4);
    return upload(bits, {static_cast<int64_t>(v.size())}, DType::kI32);
  }

  // The candidate's values, after checking that it ran on the GPU and kept inside its buffer.
  std::vector<float> download(const Device& d) {
    runtime_->synchronize();
    EXPECT_TRUE(cuda::is_device_pointer(d.tensor.data()))
        << "the candidate's output is not device memory";
    const size_t es = dtype_size(d.dtype);
    std::vector<uint16_t> all((d.elements + 2 * kGuard) * es / 2);
    d.buffer.download(all.data(), all.size() * 2, 0);
    for (size_t i = 0; i < kGuard * es / 2; ++i) {
      EXPECT_EQ(all[i], kSentinel) << "write before the output at element " << i / (es / 2);
      EXPECT_EQ(all[all.size() - 1 - i], kSentinel) << "write past the output";
    }
    std::vector<float> out(d.elements);
    const uint16_t* body = all.data() + kGuard * es / 2;
    for (size_t i = 0; i < d.elements; ++i) {
      if (d.dtype == DType::kBF16) {
        out[i] = bf16_to_f32(body[i]);
      } else {
        std::memcpy(&out[i], body + 2 * i, 4);
      }
    }
    return out;
  }

  void expect_close(const std::vector<float>& reference, const std::vector<float>& candidate,
                    const std::string& what, double tol = 0) {
    if (tol == 0) tol = tolerance();
    ASSERT_EQ(reference.size(), candidate.size()) << what;
    for (size_t i = 0; i < reference.size(); ++i)
      ASSERT_NEAR(candidate[i], reference[i], tol * (1.0 + std::abs(reference[i])))
          << what << ": element " << i << " (reference vs candidate)";
  }

  // Block tables for sequences of these lengths, one row each, over a pool of exactly the blocks
  // they need, handed out in a shuffled order (unused entries -1: a read of one would fail the
  // parity).
  struct PagedTables {
    std::vector<int32_t> tables;
    int blocks = 0, max_blocks = 0;
  };
  PagedTables paged_tables(const std::vector<int>& seq_len, int block_size) {
    PagedTables p;
    for (int len : seq_len) {
      const int nb = (len + block_size - 1) / block_size;
      p.blocks += nb;
      p.max_blocks = std::max(p.max_blocks, nb);
    }
    std::vector<int32_t> order(static_cast<size_t>(p.blocks));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng_);
    const size_t width = static_cast<size_t>(p.max_blocks);
    p.tables.assign(seq_len.size() * width, -1);
    size_t next = 0;
    for (size_t i = 0; i < seq_len.size(); ++i)
      for (int b = 0; b < (seq_len[i] + block_size - 1) / block_size; ++b)
        p.tables[i * width + b] = order[next++];
    return p;
  }
  // Keys or values in [-1, 1) as a cache of `kv` holds them: a bf16 cache's rounded, which the
  // reference then reads in f32.
  std::vector<float> kv_pool(int64_t elements, DType kv) {
    std::vector<float> pool(static_cast<size_t>(elements));
    for (float& v : pool) {
      v = std::uniform_real_distribution<float>(-1, 1)(rng_);
      if (kv == DType::kBF16) v = bf16_to_f32(f32_to_bf16(v));
    }
    return pool;
  }

  static Tensor host(std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return Tensor(v.data(), DType::kF32, shape);
  }

  // The GPU's compute capability major, from the runtime's description ("..., compute
  // capability 9.0").
  int compute_capability_major() const {
    const std::string text = runtime_->describe(), key = "compute capability ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + key.size());
  }

  // Chooses the prefill attention kernel for a scope, restoring the previous choice however it
  // ends.
  struct TensorCoreAttention {
    explicit TensorCoreAttention(bool on) : previous(ops::cuda::use_tensor_core_attention(on)) {}
    ~TensorCoreAttention() { ops::cuda::use_tensor_core_attention(previous); }
    TensorCoreAttention(const TensorCoreAttention&) = delete;
    TensorCoreAttention& operator=(const TensorCoreAttention&) = delete;
    bool previous;
  };

  std::mt19937 rng_{1234};
  std::unique_ptr<CudaRuntime> runtime_;
  DeviceContext gpu_;
  DeviceContext cpu_;
};

TEST_P(GpuOps, AddAndSiluMul) {
  for (int64_t n : {1, 1000, 65537}) {
    std::vector<float> x = random(static_cast<size_t>(n)), y = random(static_cast<size_t>(n), 3.0f);
    Device gx = upload(x, {n}), gy = upload(y, {n});
    ops::add(gpu_, gx.tensor, gy.tensor);
    ops::silu_mul(gpu_, gy.tensor, gy.tensor, gx.tensor);  // gy = silu(y) * (x + y)
    std::vector<float> rx = x, ry = y;
    ops::add(cpu_, host(rx, {n}), host(ry, {n}));
    ops::silu_mul(cpu_, host(ry, {n}), host(ry, {n}), host(rx, {n}));
    expect_close(rx, download(gx), "add n=" + std::to_string(n));
    expect_close(ry, download(gy), "silu_mul n=" + std::to_string(n));
  }
}

TEST_P(GpuOps, RmsNorm) {
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 64}, {7, 4096}, {33, 1000}}) {
    std::vector<float> x = random(static_cast<size_t>(rows * d), 2.0f), out(x.size());
    std::vector<float> w(static_cast<size_t>(d));
    for (float& v : w) v = 1.0f + 0.1f * std::uniform_real_distribution<float>(-1, 1)(rng_);
    Device gx = upload(x, {rows, d}), gout = upload(out, {rows, d}),
           gw = upload(w, {d}, DType::kF32);
    ops::rms_norm(gpu_, gout.tensor, gx.tensor, gw.tensor, 1e-5f);
    ops::rms_norm(cpu_, host(out, {rows, d}), host(x, {rows, d}), host(w, {d}), 1e-5f);
    expect_close(out, download(gout), "rms_norm " + std::to_string(rows) + "x" + std::to_string(d));
  }
}

// The ops that write a GEMM's input: f32 in, bf16 out (the model's path with bf16 weights), against
// the CPU's f32 result within bf16 rounding.
TEST_P(GpuOps, F32InputsWriteBf16GemmInputs) {
  if (act() == DType::kBF16) GTEST_SKIP() << "one case: f32 in, bf16 out";
  const int64_t rows = 9, d = 1000;
  std::vector<float> x = random(static_cast<size_t>(rows * d), 2.0f), up = random(x.size()),
                     w(static_cast<size_t>(d));
  for (float& v : w) v = 1.0f + 0.1f * std::uniform_real_distribution<float>(-1, 1)(rng_);
  std::vector<float> zeros(x.size(), 0.0f);
  Device gx = upload(x, {rows, d}, DType::kF32), gup = upload(up, {rows, d}, DType::kF32);
  Device gw = upload(w, {d}, DType::kF32), gnorm = upload(zeros, {rows, d}, DType::kBF16);
  Device gact = upload(zeros, {rows, d}, DType::kBF16);
  ops::rms_norm(gpu_, gnorm.tensor, gx.tensor, gw.tensor, 1e-5f);
  ops::silu_mul(gpu_, gact.tensor, gx.tensor, gup.tensor);
  std::vector<float> norm(x.size()), act = x;
  ops::rms_norm(cpu_, host(norm, {rows, d}), host(x, {rows, d}), host(w, {d}), 1e-5f);
  ops::silu_mul(cpu_, host(act, {rows, d}), host(act, {rows, d}), host(up, {rows, d}));
  expect_close(norm, download(gnorm), "rms_norm f32 -> bf16", 1e-2);
  expect_close(act, download(gact), "silu_mul f32 -> bf16", 1e-2);
}

TEST_P(GpuOps, Rope) {
  for (auto [rows, heads, hd] : {std::tuple<int64_t, int, int>{5, 4, 64}, {3, 8, 128}, {1, 1, 2}}) {
    std::vector<float> x = random(static_cast<size_t>(rows * heads * hd));
    std::vector<float> c(static_cast<size_t>(rows * hd / 2)), s(c.size());
    for (size_t i = 0; i < c.size(); ++i) {
      c[i] = static_cast<float>(std::cos(0.37 * static_cast<double>(i)));
      s[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    }
    Device gx = upload(x, {rows, int64_t{heads} * hd});
    Device gc = upload(c, {rows, hd / 2}, DType::kF32), gs = upload(s, {rows, hd / 2}, DType::kF32);
    ops::rope(gpu_, gx.tensor, gc.tensor, gs.tensor, heads, hd);
    ops::rope(cpu_, host(x, {rows, int64_t{heads} * hd}), host(c, {rows, hd / 2}),
              host(s, {rows, hd / 2}), heads, hd);
    expect_close(x, download(gx),
                 "rope heads=" + std::to_string(heads) + " head_dim=" + std::to_string(hd));
  }
}

TEST_P(GpuOps, EmbeddingOfTheRowsThisRankHolds) {
  const int64_t rows = 100, d = 72;
  const int vocab_begin = 50;
  std::vector<float> table = random(static_cast<size_t>(rows * d));
  const std::vector<int32_t> tokens = {50, 149, 0, 150, 99, 120, 49};  // three outside [50, 150)
  std::vector<float> out(tokens.size() * d);
  Device gt = upload(table, {rows, d}),
         gout = upload(out, {static_cast<int64_t>(tokens.size()), d});
  Device gtok = upload_i32(tokens);
  ops::embedding(gpu_, gout.tensor, gt.tensor, gtok.tensor, vocab_begin);
  std::vector<int32_t> host_tokens = tokens;
  ops::embedding(cpu_, host(out, {static_cast<int64_t>(tokens.size()), d}), host(table, {rows, d}),
                 Tensor(host_tokens.data(), DType::kI32, {static_cast<int64_t>(tokens.size())}),
                 vocab_begin);
  expect_close(out, download(gout), "embedding");
}

TEST_P(GpuOps, MatmulWithF32AndBf16Weights) {
  for (auto [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 768, 2048}, {33, 100, 513}, {128, 1024, 1024}}) {
    for (DType wtype : {DType::kF32, DType::kBF16}) {
      std::vector<float> x = random(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k)),
                         out(static_cast<size_t>(m * n));
      for (float& v : w)
        v = std::uniform_real_distribution<float>(-1, 1)(rng_) / std::sqrt(static_cast<float>(k));
      DeviceBuffer gw_mem(ops::weight_bytes(gpu_, n, k, wtype));
      const ops::Weight gw = ops::pack_weight(gpu_, host(w, {n, k}), wtype, gw_mem.data());
      Buffer cw_mem(ops::weight_bytes(cpu_, n, k, wtype));
      const ops::Weight cw = ops::pack_weight(cpu_, host(w, {n, k}), wtype, cw_mem.data());
      EXPECT_FLOAT_EQ(ops::weight_at(gw, n - 1, k - 1), ops::weight_at(cw, n - 1, k - 1));
      Device gx = upload(x, {m, k}), gout = upload(out, {m, n});
      ops::matmul(gpu_, gout.tensor, gx.tensor, gw);
      ops::matmul(cpu_, host(out, {m, n}), host(x, {m, k}), cw);
      // With bf16 weights the GPU multiplies bf16 activations (f32 ones are rounded first, by
      // design).
      expect_close(out, download(gout),
                   "matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                       std::to_string(k) + " weights " + dtype_name(wtype),
                   wtype == DType::kBF16 ? 3e-2 : 0);
    }
  }
}

// Seeded benchmark weights drawn on the GPU are the CPU's bits: the f32 fill exactly, a bf16 weight
// the f32 value rounded to nearest even, padding rows 0, and the guards intact.
TEST_P(GpuOps, SeededFillIsTheCpusBits) {
  if (act() != DType::kF32) GTEST_SKIP() << "dtype-independent: runs once, with the f32 instance";
  ops::UniformFill f;
  f.stream = 0xC0FFEEull;
  f.full_cols = 1000;
  f.row0 = 17;
  f.col0 = 300;
  f.present = 61;  // of 64 rows: the last three are padding
  f.scale = 0.03125f;
  f.offset = 1.0f;
  const int64_t rows = 64, cols = 333;
  std::vector<float> reference(static_cast<size_t>(rows * cols));
  ops::fill_uniform(cpu_, host(reference, {rows, cols}), f);
  Device plain = upload(std::vector<float>(reference.size(), 0.0f), {rows, cols}, DType::kF32);
  ops::fill_uniform(gpu_, plain.tensor, f);
  const std::vector<float> got = download(plain);
  for (size_t i = 0; i < reference.size(); ++i)
    ASSERT_EQ(got[i], reference[i]) << "element " << i << " (reference vs candidate)";
  for (DType wtype : {DType::kF32, DType::kBF16}) {
    DeviceBuffer gw_mem(ops::weight_bytes(gpu_, rows, cols, wtype));
    const ops::Weight gw = ops::fill_weight_uniform(gpu_, rows, cols, wtype, f, gw_mem.data());
    Buffer cw_mem(ops::weight_bytes(cpu_, rows, cols, wtype));
    const ops::Weight cw = ops::fill_weight_uniform(cpu_, rows, cols, wtype, f, cw_mem.data());
    runtime_->synchronize();
    EXPECT_TRUE(cuda::is_device_pointer(gw.data)) << "the candidate's weight is not device memory";
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(ops::weight_at(gw, r, c), ops::weight_at(cw, r, c))
            << dtype_name(wtype) << " (" << r << ", " << c << ")";
  }
}

// Paged attention: a pool of blocks handed out in a shuffled order, several sequences, decode
// tokens of long contexts and a 104-token prefill chunk of one sequence (causal: each token sees
// one position more than the one before). The KV pools are f32 or bf16 (the cache's dtype) whatever
// the activations. Without runs, few tokens × heads split long contexts along the sequence
// (flash-decoding; the 40-head shape fills the GPU without); with runs the prefill kernel takes the
// step: the fp32 run kernel (tiles of 32 queries: 104 = 3 × 32 + 8) or, with a bf16 cache and
// head_dim 64 or 128 on sm_80+, the tensor-core kernel (tiles of 64: 104 = 64 + 40, the second
// with a partly filled third warp and an idle fourth; key tiles of 64 across the causal edge),
// which also runs with queries 8 times larger (a peaked softmax: its row maxima matter) and whose
// steps the fp32 run kernel then repeats. The tensor-core kernel rounds the probabilities to bf16
// (relative 2^-9) and keeps the queries to about 16 bits: 4e-3 with f32 activations.
TEST_P(GpuOps, PagedAttentionDecodeAndPrefill) {
  struct Shape {
    int heads, kv_heads, head_dim, block_size;
    DType kv;
  };
  for (const Shape sh : {Shape{4, 4, 64, 16, DType::kF32}, Shape{8, 2, 128, 16, DType::kBF16},
                         Shape{32, 4, 64, 32, DType::kF32}, Shape{40, 8, 128, 16, DType::kBF16},
                         Shape{12, 12, 64, 16, DType::kBF16}, Shape{2, 1, 256, 8, DType::kF32}}) {
    std::vector<int> contexts = {1, 17, 300, 2000};
    std::vector<int32_t> seq_of_token = {0, 1, 2, 3};
    constexpr int kChunk = 104, kChunkStart = 30;
    for (int pos = kChunkStart; pos < kChunkStart + kChunk; ++pos) {
      contexts.push_back(pos + 1);
      seq_of_token.push_back(4);
    }
    const std::vector<int32_t> runs = {0, 1, 1, 1, 2, 1, 3, 1, 4, kChunk};
    const int n_seqs = 5;
    const std::vector<int> seq_len = {1, 17, 300, 2000, kChunkStart + kChunk};
    const PagedTables paged = paged_tables(seq_len, sh.block_size);
    const std::vector<int32_t>& tables = paged.tables;
    const int max_blocks = paged.max_blocks;
    const int64_t kv_stride = int64_t{sh.kv_heads} * sh.head_dim;
    const int64_t pool_rows = int64_t{paged.blocks} * sh.block_size;
    const DType kv_type = sh.kv;
    std::vector<float> keys = kv_pool(pool_rows * kv_stride, kv_type),
                       values = kv_pool(pool_rows * kv_stride, kv_type);
    const int64_t tokens = static_cast<int64_t>(contexts.size()),
                  q_width = int64_t{sh.heads} * sh.head_dim;
    std::vector<float> q = random(static_cast<size_t>(tokens * q_width)), out(q.size());
    Device gk = upload(keys, {pool_rows, kv_stride}, kv_type),
           gv = upload(values, {pool_rows, kv_stride}, kv_type);
    Device gtables = upload_i32(tables), gseq = upload_i32(seq_of_token),
           gctx = upload_i32(contexts);
    Device gruns = upload_i32(runs);
    std::vector<int32_t> host_tables = tables, host_seq = seq_of_token,
                         host_ctx(contexts.begin(), contexts.end());
    const ops::AttentionShape shape{
        sh.heads, sh.kv_heads, sh.head_dim,
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim))), sh.block_size};
    const bool tensor_cores = ops::cuda::tensor_core_attention(sh.head_dim, kv_type);
    if (kv_type == DType::kBF16 && sh.head_dim <= 128 && compute_capability_major() >= 8) {
      EXPECT_TRUE(tensor_cores) << "a bf16 cache with head_dim " << sh.head_dim
                                << " should take the tensor cores";
    }
    // 0: runs (on tensor cores where they apply); 1: no runs, the exact longest context; 2: no
    // runs, no hint; where variant 0 took the tensor cores, 3: its step on the fp32 run kernel,
    // 4: its step with queries 8 times larger.
    for (int variant = 0; variant < (tensor_cores ? 5 : 3); ++variant) {
      const bool runs_step = variant == 0 || variant >= 3,
                 on_tensor_cores = tensor_cores && runs_step && variant != 3;
      const int hint = variant == 1 ? 2000 : 0;
      const TensorCoreAttention kernel_choice(variant != 3);
      ops::KvBatch gpu_kv{gk.tensor,
                          gv.tensor,
                          gtables.tensor.reshape({n_seqs, max_blocks}),
                          gseq.tensor,
                          gctx.tensor,
                          hint,
                          runs_step ? gruns.tensor.reshape({5, 2}) : Tensor(),
                          runs_step ? kChunk : 0};
      ops::KvBatch cpu_kv{host(keys, {pool_rows, kv_stride}),
                          host(values, {pool_rows, kv_stride}),
                          Tensor(host_tables.data(), DType::kI32, {n_seqs, max_blocks}),
                          Tensor(host_seq.data(), DType::kI32, {tokens}),
                          Tensor(host_ctx.data(), DType::kI32, {tokens}),
                          hint,
                          Tensor(),
                          0};
      const std::string what =
          "attention heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) +
          " head_dim " + std::to_string(sh.head_dim) + " variant " + std::to_string(variant) +
          " KV " + dtype_name(kv_type) + (on_tensor_cores ? " (tensor cores)" : "");
      std::vector<float> qv = q;
      if (variant == 4)
        for (float& x : qv) x *= 8.0f;  // exact in bf16 too
      Device gq = upload(qv, {tokens, q_width}), gout = upload(out, {tokens, q_width});
      ops::attention(gpu_, gout.tensor, gq.tensor, gpu_kv, shape);
      ops::attention(cpu_, host(out, {tokens, q_width}), host(qv, {tokens, q_width}), cpu_kv,
                     shape);
      expect_close(out, download(gout), what, on_tensor_cores ? std::max(tolerance(), 4e-3) : 0);
      if (act() ==
          DType::kF32) {  // f32 queries, bf16 output (the model's Wo input with bf16 weights)
        std::vector<float> zeros(out.size(), 0.0f);
        Device gout16 = upload(zeros, {tokens, q_width}, DType::kBF16);
        ops::attention(gpu_, gout16.tensor, gq.tensor, gpu_kv, shape);
        expect_close(out, download(gout16), what + " f32 -> bf16 output", 1e-2);
      }
    }
  }
}

// Decode steps of 1 to 3 sequences, as at batch 1 and in a recorded graph: too few tokens × heads
// to fill the GPU (twice its multiprocessors), so each long context is split along the sequence
// (flash-decoding) and the pieces are merged. Contexts on both sides of the 256 positions a split
// covers at least and of block edges, up to 8191; grouped-query heads 4:1 at head_dim 64 and 128,
// f32 and bf16 caches; with the exact longest context as the hint, and without (then the splits
// follow the block table's width).
TEST_P(GpuOps, SplitDecodeAttentionOfFewSequences) {
  struct Shape {
    int heads, kv_heads, head_dim, block_size;
    DType kv;
  };
  const std::vector<std::vector<int>> steps = {{8191}, {255, 257}, {1, 4096, 8191}, {300, 17}};
  for (const Shape sh : {Shape{32, 8, 128, 16, DType::kBF16}, Shape{32, 8, 128, 16, DType::kF32},
                         Shape{32, 8, 64, 32, DType::kBF16}, Shape{8, 8, 64, 16, DType::kF32}}) {
    for (const std::vector<int>& contexts : steps) {
      const int n = static_cast<int>(contexts.size());
      const int max_ctx = *std::max_element(contexts.begin(), contexts.end());
      const PagedTables paged = paged_tables(contexts, sh.block_size);
      const std::vector<int32_t>& tables = paged.tables;
      const int max_blocks = paged.max_blocks;
      std::vector<int32_t> seq_of_token(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i)
        seq_of_token[static_cast<size_t>(i)] = i;  // one token per sequence
      const int64_t kv_stride = int64_t{sh.kv_heads} * sh.head_dim,
                    pool_rows = int64_t{paged.blocks} * sh.block_size;
      std::vector<float> keys = kv_pool(pool_rows * kv_stride, sh.kv),
                         values = kv_pool(pool_rows * kv_stride, sh.kv);
      const int64_t q_width = int64_t{sh.heads} * sh.head_dim;
      std::vector<float> q = random(static_cast<size_t>(n * q_width)), out(q.size());
      Device gk = upload(keys, {pool_rows, kv_stride}, sh.kv),
             gv = upload(values, {pool_rows, kv_stride}, sh.kv);
      Device gtables = upload_i32(tables), gseq = upload_i32(seq_of_token),
             gctx = upload_i32(contexts);
      std::vector<int32_t> host_tables = tables, host_seq = seq_of_token, host_ctx = contexts;
      const ops::AttentionShape shape{
          sh.heads, sh.kv_heads, sh.head_dim,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim))), sh.block_size};
      for (const int hint : {max_ctx, 0}) {
        const int split_over = hint > 0 ? hint : max_blocks * sh.block_size;
        const int splits = ops::cuda::decode_attention_splits(n, sh.heads, split_over);
        const std::string what =
            "decode of " + std::to_string(n) + " sequences, longest " + std::to_string(max_ctx) +
            ", heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) +
            " head_dim " + std::to_string(sh.head_dim) + " KV " + dtype_name(sh.kv) + " hint " +
            std::to_string(hint) + ", " + std::to_string(splits) + " splits";
        if (max_ctx > 512 && n * sh.heads < 2 * multiprocessor_count()) {
          EXPECT_GT(splits, 1)
              << what << ": a long context of too few tokens x heads to fill the GPU should split";
        }
        ops::KvBatch gpu_kv{gk.tensor,
                            gv.tensor,
                            gtables.tensor.reshape({n, max_blocks}),
                            gseq.tensor,
                            gctx.tensor,
                            hint,
                            Tensor(),
                            0};
        ops::KvBatch cpu_kv{host(keys, {pool_rows, kv_stride}),
                            host(values, {pool_rows, kv_stride}),
                            Tensor(host_tables.data(), DType::kI32, {n, max_blocks}),
                            Tensor(host_seq.data(), DType::kI32, {n}),
                            Tensor(host_ctx.data(), DType::kI32, {n}),
                            hint,
                            Tensor(),
                            0};
        Device gq = upload(q, {n, q_width}), gout = upload(out, {n, q_width});
        ops::attention(gpu_, gout.tensor, gq.tensor, gpu_kv, shape);
        ops::attention(cpu_, host(out, {n, q_width}), host(q, {n, q_width}), cpu_kv, shape);
        expect_close(out, download(gout), what);
      }
    }
  }
}

// Appending keys and values at scattered pool rows, gathering logit rows, masking vocab padding.
TEST_P(GpuOps, KvWriteGatherRowsAndFillColumns) {
  if (act() == DType::kBF16)
    GTEST_SKIP() << "the KV cache and the k/v written into it are f32 in this build";
  const int64_t pool_rows = 64, width = 96, n = 5;
  std::vector<float> kpool = random(static_cast<size_t>(pool_rows * width)),
                     vpool = random(kpool.size());
  std::vector<float> k = random(static_cast<size_t>(n * width)), v = random(k.size());
  const std::vector<int32_t> rows = {63, 0, 17, 18, 40};
  Device gkp = upload(kpool, {pool_rows, width}), gvp = upload(vpool, {pool_rows, width});
  Device gk = upload(k, {n, width}), gv = upload(v, {n, width}), grows = upload_i32(rows);
  ops::kv_write(gpu_, gkp.tensor, gvp.tensor, gk.tensor, gv.tensor, grows.tensor);
  std::vector<int32_t> host_rows = rows;
  const Tensor hrows(host_rows.data(), DType::kI32, {n});
  ops::kv_write(cpu_, host(kpool, {pool_rows, width}), host(vpool, {pool_rows, width}),
                host(k, {n, width}), host(v, {n, width}), hrows);
  expect_close(kpool, download(gkp), "kv_write keys", 1e-7);
  expect_close(vpool, download(gvp), "kv_write values", 1e-7);
  {  // into a bf16 cache: converted on the way in, as the CPU does
    std::vector<float> k16(static_cast<size_t>(pool_rows * width), 0.0f), v16 = k16;
    std::vector<uint16_t> hk16(k16.size(), 0), hv16(k16.size(), 0);
    Device gk16 = upload(k16, {pool_rows, width}, DType::kBF16),
           gv16 = upload(v16, {pool_rows, width}, DType::kBF16);
    ops::kv_write(gpu_, gk16.tensor, gv16.tensor, gk.tensor, gv.tensor, grows.tensor);
    ops::kv_write(cpu_, Tensor(hk16.data(), DType::kBF16, {pool_rows, width}),
                  Tensor(hv16.data(), DType::kBF16, {pool_rows, width}), host(k, {n, width}),
                  host(v, {n, width}), hrows);
    for (size_t i = 0; i < k16.size(); ++i) {
      k16[i] = bf16_to_f32(hk16[i]);
      v16[i] = bf16_to_f32(hv16[i]);
    }
    expect_close(k16, download(gk16), "kv_write keys into bf16", 1e-7);
    expect_close(v16, download(gv16), "kv_write values into bf16", 1e-7);
  }

  std::vector<float> gathered(static_cast<size_t>(n * width));
  Device gg = upload(gathered, {n, width});
  ops::gather_rows(gpu_, gg.tensor, gkp.tensor, grows.tensor);
  ops::gather_rows(cpu_, host(gathered, {n, width}), host(kpool, {pool_rows, width}), hrows);
  expect_close(gathered, download(gg), "gather_rows", 1e-7);

  for (int64_t from : {int64_t{95}, int64_t{50}, int64_t{0}}) {
    ops::fill_columns(gpu_, gkp.tensor, from, -INFINITY);
    ops::fill_columns(cpu_, host(kpool, {pool_rows, width}), from, -INFINITY);
    const std::vector<float> got = download(gkp);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(got[i] == kpool[i] || (std::isinf(got[i]) && std::isinf(kpool[i])))
          << "fill_columns from " << from << " element " << i;
  }
}

// The log-softmax sums of scored rows, on the device: rows picked out of order and repeated, a
// chosen column outside this shard (-1) and one at the last column; a 128256-wide vocabulary.
TEST_P(GpuOps, LogitSumsOfScoredRows) {
  if (act() != DType::kF32)
    GTEST_SKIP() << "logits are f32 whatever the activations: runs with the f32 instance";
  const int64_t r = 9, cols = 128256;
  std::vector<float> logits(static_cast<size_t>(r * cols));
  std::normal_distribution<float> g(0.0f, 4.0f);
  for (float& v : logits) v = g(rng_);
  const std::vector<int32_t> rows = {7, 0, 3, 3, 8};
  const std::vector<int32_t> chosen = {5, -1, static_cast<int32_t>(cols - 1), 0, 1000};
  std::vector<float> max(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    max[i] =
        *std::max_element(logits.begin() + rows[i] * cols, logits.begin() + (rows[i] + 1) * cols);
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> sums(static_cast<size_t>(2 * n), -1.0f);
  std::vector<int32_t> hrows = rows, hchosen = chosen;
  ops::logit_sums(cpu_, host(sums, {2 * n}), host(logits, {r, cols}),
                  Tensor(hrows.data(), DType::kI32, {n}), host(max, {n}),
                  Tensor(hchosen.data(), DType::kI32, {n}));
  Device glogits = upload(logits, {r, cols}, DType::kF32), gmax = upload(max, {n}, DType::kF32);
  Device grows = upload_i32(rows), gchosen = upload_i32(chosen),
         gsums = upload(std::vector<float>(sums.size(), -1.0f), {2 * n}, DType::kF32);
  ops::logit_sums(gpu_, gsums.tensor, glogits.tensor, grows.tensor, gmax.tensor, gchosen.tensor);
  const std::vector<float> got = download(gsums);
  expect_close(sums, got, "logit_sums", 1e-6);
  EXPECT_EQ(got[static_cast<size_t>(n + 1)], 0.0f);  // the column this shard does not hold
}

// Logit edits (penalties, biases, bans): the GPU's one thread per cell against the CPU loop, cell
// for cell, with a scale on positive and negative logits, a ban and cells spread over the rows.
TEST_P(GpuOps, EditLogitsMatchesTheCpu) {
  if (act() == DType::kBF16) GTEST_SKIP() << "logits are f32 whatever the activations";
  const int64_t rows = 6, cols = 32000, n = 20000;
  std::vector<float> logits = random(static_cast<size_t>(rows * cols), 8.0f);
  std::vector<int32_t> cells;
  std::vector<float> params;
  for (int64_t i = 0; i < n; ++i) {  // distinct cells: row i % rows, column (i * 7) % cols
    cells.insert(cells.end(),
                 {static_cast<int32_t>(i % rows), static_cast<int32_t>((i * 7) % cols)});
    params.insert(params.end(), {i % 97 == 0 ? -INFINITY : 0.01f * static_cast<float>(i % 13),
                                 i % 3 == 0 ? 1.0f : 1.3f, 0.05f * static_cast<float>(i % 5)});
  }
  std::vector<float> expected = logits;
  ops::edit_logits(cpu_, host(expected, {rows, cols}), Tensor(cells.data(), DType::kI32, {n, 2}),
                   host(params, {n, 3}));
  Device gl = upload(logits, {rows, cols}, DType::kF32), gp = upload(params, {n, 3}, DType::kF32);
  Device gc = upload_i32(cells);
  ops::edit_logits(gpu_, gl.tensor, gc.tensor.reshape({n, 2}), gp.tensor);
  const std::vector<float> got = download(gl);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(got[i] == expected[i]) << "logit " << i << ": " << got[i] << " vs " << expected[i];
}

// Grammar masks: the GPU's blocks over a row's columns against the CPU loop, on a 128k slice with
// sparse and dense masks and a slice starting mid-vocabulary.
TEST_P(GpuOps, MaskLogitsMatchesTheCpu) {
  if (act() == DType::kBF16) GTEST_SKIP() << "logits are f32 whatever the activations";
  const int64_t rows = 5, cols = 64128, width = (128256 + 31) / 32, first = 64128;
  std::vector<float> logits = random(static_cast<size_t>(rows * cols), 8.0f);
  std::vector<int32_t> masked = {4, 1, 2};
  std::vector<int32_t> words(static_cast<size_t>(3 * width), 0);
  for (int64_t w = 0; w < width; ++w) {
    words[static_cast<size_t>(w)] =
        static_cast<int32_t>(0x01010101u * static_cast<uint32_t>(w % 7));
    words[static_cast<size_t>(width + w)] = -1;                       // everything
    words[static_cast<size_t>(2 * width + w)] = w % 97 == 0 ? 4 : 0;  // a few tokens
  }
  std::vector<float> expected = logits;
  ops::mask_logits(cpu_, host(expected, {rows, cols}), Tensor(masked.data(), DType::kI32, {3}),
                   Tensor(words.data(), DType::kI32, {3, width}), first);
  Device gl = upload(logits, {rows, cols}, DType::kF32);
  Device gr = upload_i32(masked), gw = upload_i32(words);
  ops::mask_logits(gpu_, gl.tensor, gr.tensor, gw.tensor.reshape({3, width}), first);
  const std::vector<float> got = download(gl);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(got[i] == expected[i]) << "logit " << i << ": " << got[i] << " vs " << expected[i];
}

// Copy on write of a KV block forked samples share: the GPU cache copies the old block's keys and
// values in every layer into the new one, device to device, and leaves every other block alone.
TEST_P(GpuOps, KvBlockCopyOnWriteCopiesEveryLayer) {
  const int layers = 3, kv_dim = 40, block = 16, blocks = 6;
  KvCache cache(layers, kv_dim, block, blocks, /*slots=*/2, gpu_, 0, act());
  cache.append_block(0, 4);
  cache.append_block(0, 1);
  const size_t per_pool = static_cast<size_t>(blocks * block * kv_dim);
  std::vector<std::vector<uint8_t>> before;
  for (int l = 0; l < layers; ++l)
    for (const Tensor& pool : {cache.key_pool(l), cache.value_pool(l)}) {
      std::vector<float> v = random(per_pool);
      std::vector<uint8_t> bytes(pool.nbytes());
      if (act() == DType::kBF16) {
        auto* b = reinterpret_cast<uint16_t*>(bytes.data());
        for (size_t i = 0; i < per_pool; ++i) b[i] = f32_to_bf16(v[i]);
      } else {
        std::memcpy(bytes.data(), v.data(), bytes.size());
      }
      ops::upload(gpu_, pool, bytes.data());
      before.push_back(std::move(bytes));
    }
  cache.replace_block(0, 1, 3);  // block 1 (the slot's second) is copied into block 3
  EXPECT_EQ(cache.blocks(0), (std::vector<int32_t>{4, 3}));
  const size_t row_bytes = static_cast<size_t>(kv_dim) * dtype_size(act());
  const size_t block_bytes = static_cast<size_t>(block) * row_bytes;
  size_t which = 0;
  for (int l = 0; l < layers; ++l)
    for (const Tensor& pool : {cache.key_pool(l), cache.value_pool(l)}) {
      std::vector<uint8_t> after(pool.nbytes());
      ops::download(gpu_, after.data(), pool);
      std::vector<uint8_t> expected = before[which++];
      std::memcpy(expected.data() + 3 * block_bytes, expected.data() + 1 * block_bytes,
                  block_bytes);
      ASSERT_TRUE(after == expected) << "layer " << l;
    }
}

TEST_P(GpuOps, ArgmaxTiesToTheLowestColumn) {
  const int64_t rows = 5, cols = 32000;
  std::vector<float> logits = random(static_cast<size_t>(rows * cols), 10.0f);
  logits[3] = logits[17] = 50.0f;                        // row 0: tie, 3 wins
  logits[static_cast<size_t>(cols + cols - 1)] = 60.0f;  // row 1: the last column
  Device gl = upload(logits, {rows, cols}, DType::kF32);
  std::vector<float> zeros(rows);
  Device gi = upload_i32(std::vector<int32_t>(rows, -1)), gval = upload(zeros, {rows}, DType::kF32);
  ops::argmax_rows(gpu_, gi.tensor, gval.tensor, gl.tensor);
  std::vector<int32_t> index(rows);
  std::vector<float> value(rows);
  ops::argmax_rows(cpu_, Tensor(index.data(), DType::kI32, {rows}),
                   Tensor(value.data(), DType::kF32, {rows}), host(logits, {rows, cols}));
  const std::vector<float> got = download(gi);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t candidate = 0;
    std::memcpy(&candidate, &got[static_cast<size_t>(r)], 4);
    EXPECT_EQ(candidate, index[static_cast<size_t>(r)]) << "row " << r;
  }
  EXPECT_EQ(index[0], 3);
  EXPECT_EQ(index[1], cols - 1);
  expect_close(value, download(gval), "argmax values");
}

// Sampling: the GPU's sort-and-draw against the CPU sampler, row by row, on the same logits and
// uniforms: every truncation alone and together, top-k at and past the vocabulary, ties (which
// go to the lower id), and columns past n holding values that must be ignored.
TEST_P(GpuOps, SampleRowsDrawTheCpuSamplersTokens) {
  if (act() == DType::kBF16) GTEST_SKIP() << "logits are f32 whatever the activations";
  std::vector<SamplingParams> settings(7);
  settings[0].temperature = 1.0;
  settings[1].temperature = 0.7, settings[1].top_k = 40;
  settings[2].temperature = 1.3, settings[2].top_p = 0.9;
  settings[3].temperature = 1.0, settings[3].min_p = 0.05;
  settings[4].temperature = 0.8, settings[4].top_k = 50, settings[4].top_p = 0.95,
  settings[4].min_p = 0.02;
  settings[5].temperature = 0.5, settings[5].top_k = 1 << 20;
  settings[6].temperature = 2.0, settings[6].top_k = 3, settings[6].top_p = 0.5;
  for (auto [cols, n] : {std::pair<int64_t, int>{1000, 1000}, {32000, 31990}, {4099, 7}}) {
    const int64_t rows = 70;  // more than one 64-row chunk is the pipeline's business, not the op's
    std::vector<float> logits = random(static_cast<size_t>(rows * cols), 6.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits.data() + r * cols;
      if (r % 5 == 0) row[n - 1] = row[0] = 9.0f;  // a tie at the top: the lower id comes first
      for (int64_t c = n; c < cols; ++c) row[c] = 50.0f;  // past n: never drawn
    }
    std::vector<ops::SampleRow> draws(static_cast<size_t>(rows));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (size_t r = 0; r < draws.size(); ++r) draws[r] = {settings[r % settings.size()], u(rng_)};
    Device gl = upload(logits, {rows, cols}, DType::kF32);
    runtime_->synchronize();
    ASSERT_TRUE(cuda::is_device_pointer(gl.tensor.data()));
    const std::vector<int32_t> candidate = ops::sample_rows(gpu_, gl.tensor, n, draws);
    const std::vector<int32_t> reference =
        ops::sample_rows(cpu_, host(logits, {rows, cols}), n, draws);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(candidate[static_cast<size_t>(r)], reference[static_cast<size_t>(r)])
          << "row " << r << " of " << cols << " columns (n " << n << "), setting " << r % 7
          << ", u " << draws[static_cast<size_t>(r)].uniform;
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, GpuOps, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& param_info) { return dtype_name(param_info.param); });

}  // namespace
}  // namespace tpllama
