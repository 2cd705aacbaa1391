// Every GPU op against the CPU op on seeded random inputs (the reference side), over a matrix of
// shapes: odd sizes, GQA ratios, block boundaries, long contexts; f32 and bf16 activations with a
// tolerance each; guard regions around every GPU output catch out-of-bounds writes; each case
// checks that the candidate's output really is device memory. Skips, saying so, without a GPU.
// The fixture is gpu_ops_fixture.h; the vocabulary head's ops are head_ops_parity_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_ops_fixture.h"

namespace tpllama {
namespace {

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

// A projection's bias on every row (Qwen2's q, k, v), on rows of a width past a block's threads.
TEST_P(GpuOps, AddBias) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {37, 3584}, {300, 129}}) {
    std::vector<float> x = random(static_cast<size_t>(rows * cols)),
                       bias = random(static_cast<size_t>(cols), 2.0f);
    Device gx = upload(x, {rows, cols}), gb = upload(bias, {cols}, DType::kF32);
    ops::add_bias(gpu_, gx.tensor, gb.tensor);
    ops::add_bias(cpu_, host(x, {rows, cols}), host(bias, {cols}));
    expect_close(x, download(gx), "add_bias " + std::to_string(rows) + "x" + std::to_string(cols));
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
    // Full attention, then Mistral's sliding window (40 positions: inside the 104-token chunk, and
    // the 300- and 2000-position decodes; SplitDecodeAttentionOfFewSequences splits windows).
    for (const int window : {0, 40}) {
      const ops::AttentionShape shape{
          sh.heads,      sh.kv_heads,
          sh.head_dim,   static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim))),
          sh.block_size, window};
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
        const std::string what = "attention heads " + std::to_string(sh.heads) + "/" +
                                 std::to_string(sh.kv_heads) + " head_dim " +
                                 std::to_string(sh.head_dim) + " window " + std::to_string(window) +
                                 " variant " + std::to_string(variant) + " KV " +
                                 dtype_name(kv_type) + (on_tensor_cores ? " (tensor cores)" : "");
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
      // Full attention, then a 1000-position sliding window: the splits share the window's
      // positions, the first split starting where it does.
      for (const int window : {0, 1000}) {
        const ops::AttentionShape shape{
            sh.heads,      sh.kv_heads,
            sh.head_dim,   static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim))),
            sh.block_size, window};
        for (const int hint : {max_ctx, 0}) {
          int split_over = hint > 0 ? hint : max_blocks * sh.block_size;
          if (window > 0) split_over = std::min(split_over, window);
          const int splits = ops::cuda::decode_attention_splits(n, sh.heads, split_over);
          const std::string what =
              "decode of " + std::to_string(n) + " sequences, longest " + std::to_string(max_ctx) +
              ", heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) +
              " head_dim " + std::to_string(sh.head_dim) + " KV " + dtype_name(sh.kv) + " hint " +
              std::to_string(hint) + ", window " + std::to_string(window) + ", " +
              std::to_string(splits) + " splits";
          if (std::min(max_ctx, window > 0 ? window : max_ctx) > 512 &&
              n * sh.heads < 2 * multiprocessor_count()) {
            EXPECT_GT(splits, 1)
                << what
                << ": a long context of too few tokens x heads to fill the GPU should split";
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

INSTANTIATE_TEST_SUITE_P(Activations, GpuOps, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& param_info) { return dtype_name(param_info.param); });

}  // namespace
}  // namespace tpllama
