// The CPU attention of long prefill runs on the project's GEMM (see the comment below).
#include "ops/cpu/avx512.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/attention_kernels.h"
#include "ops/cpu/gemm.h"

namespace tpllama::ops::cpu {

namespace {

using namespace avx512;

// Prefill runs on the GEMM. A run is kGemmRun or more consecutive tokens of one sequence at
// consecutive positions (token i of the run sees c0 + i positions). Per kv head, its keys are
// packed as a GEMM weight (positions as rows) and its values as Vᵀ (head dimensions as rows,
// each panel's positions in order, so any prefix of positions is itself a packed panel); then
// blocks of the run's queries, all query heads of the group stacked, take the positions the
// block's last token sees a tile of kColTile at a time: S = Q·Kᵀ over the tile, its causal
// softmax against each row's running maximum (the rows' sums so far and outputs rescaled where the
// maximum grows), and O += P·V panel by panel; at the end O / the sum. A tile of scores stays in
// L2 whatever the context (a whole row of scores at 8k positions went to memory and back three
// times). The products run at the GEMM's FLOP rate, where the per-token kernels are bound by
// loads and lane reductions (a 1000-token prompt: 1.16x prefill, see scripts/README.md).
// Positions a block's earlier tokens do not see enter P·V with probability 0.
constexpr int64_t kGemmRows = 240;  // stacked query rows per block at most: one GEMM row block
constexpr int64_t kColTile = 512;   // positions a tile of scores (a multiple of kPanelRows)
// Working memory is bounded whatever the context: kv heads are packed in passes of at most
// kPackFloats.
constexpr int64_t kPackFloats = int64_t{16} << 20;  // 64 MiB

// A float buffer of at least n elements, 64-byte aligned (the GEMM's packed weights), reusing v.
float* aligned_floats(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n) + 16);
  const auto misalign = reinterpret_cast<uintptr_t>(v.data()) % 64;
  return v.data() + (misalign == 0 ? 0 : (64 - misalign) / sizeof(float));
}

// One row's tile of scores, [0, n), of which [lo, hi) are seen, against the row's running maximum
// mx (of scale-free scores; -inf before any): row[lo, hi) ← e^(scale · (row - m)) with m = max(mx,
// the tile's maximum), the rest ← 0; mx ← m. Returns the tile's sum, and in rescale e^(scale · (the
// old mx - m)), what the row's sum and output so far are multiplied by (1 where m did not grow).
__attribute__((target("avx512f"))) float tile_softmax_avx512(float* row, int64_t lo, int64_t hi,
                                                             int64_t n, float scale, float& mx,
                                                             float& rescale) {
  rescale = 1.0f;  // where the row sees none of the tile (lo >= hi), m stays mx: all zeros, sum 0
  for (int64_t t = 0; t < lo; t += 16)
    _mm512_mask_storeu_ps(row + t, lanes(lo - t), _mm512_setzero_ps());
  __m512 tm = _mm512_set1_ps(-INFINITY);
  for (int64_t t = lo; t < hi; t += 16)
    tm = _mm512_max_ps(tm, _mm512_mask_loadu_ps(tm, lanes(hi - t), row + t));
  const float m = std::max(mx, _mm512_reduce_max_ps(tm));
  if (m > mx) {
    rescale = mx == -INFINITY ? 0.0f : std::exp(scale * (mx - m));
    mx = m;
  }
  const __m512 mv = _mm512_set1_ps(m), sc = _mm512_set1_ps(scale);
  __m512 total = _mm512_setzero_ps();
  for (int64_t t = lo; t < hi; t += 16) {
    const __mmask16 k = lanes(hi - t);
    const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + t), mv), sc);
    const __m512 e = _mm512_maskz_mov_ps(k, exp_avx512(x));
    _mm512_mask_storeu_ps(row + t, k, e);
    total = _mm512_add_ps(total, e);
  }
  for (int64_t t = hi; t < n; t += 16)
    _mm512_mask_storeu_ps(row + t, lanes(n - t), _mm512_setzero_ps());
  return _mm512_reduce_add_ps(total);
}

// Per-thread buffers of the run GEMMs.
struct RunScratch {
  std::vector<float> x, scores, o, acc, sum, max;
};

// Keys and values of kv head g over positions [p0, n), m = n - p0 of them, position t packed as
// u = t - p0, into kp (keys as gemm.h's panels: u's dimension d at [((u / 32) · hd + d) · 32 + u %
// 32], positions past n zero) and vp (Vᵀ: u's dimensions 32p.. at [(p · m + u) · 32, + 32),
// dimensions past hd zero). Any run of positions from a panel boundary (keys) or from any
// position (values) is itself packed.
template <typename KV>
void pack_head(float* kp, int64_t keys_floats, float* vp, const KvView& first, int64_t p0,
               int64_t n, int g, const AttentionShape& s) {
  const int hd = s.head_dim;
  const int64_t panels = (hd + kPanelRows - 1) / kPanelRows, m = n - p0;
  std::fill(kp + m / kPanelRows * kPanelRows * hd, kp + keys_floats, 0.0f);
  for_each_row<KV>(first, p0, n, s, g, [&](int64_t t, const KV* key, const KV* value) {
    const int64_t u = t - p0;
    float* kdst = kp + (u / kPanelRows * hd) * kPanelRows + u % kPanelRows;
    for (int d = 0; d < hd; ++d) kdst[d * kPanelRows] = as_f32(key[d]);
    for (int64_t p = 0; p < panels; ++p) {
      float* vdst = vp + (p * m + u) * kPanelRows;
      for (int64_t j = 0; j < kPanelRows; ++j)
        vdst[j] = p * kPanelRows + j < hd ? as_f32(value[p * kPanelRows + j]) : 0.0f;
    }
  });
}

// The run of T tokens whose first token's view is `first` (q and out: the run's first row).
template <typename KV>
void attend_run_gemm(float* out, const float* q, const KvView& first, int64_t T,
                     const AttentionShape& s) {
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads, threads = omp_get_max_threads();
  const int64_t q_stride = int64_t{s.n_heads} * hd;
  const int64_t c0 = first.n_ctx, n = c0 + T - 1;  // the positions the run's last token sees
  // Under a sliding window no token of the run sees a position before its first token's window:
  // only [p0, n) is packed, p0 on a panel boundary (and each block of tokens below reads from its
  // own first token's window on), so the products cover the window, not the whole context.
  const auto window_start = [&s](int64_t n_ctx) {
    return s.window > 0 ? std::max<int64_t>(0, n_ctx - s.window) / kPanelRows * kPanelRows : 0;
  };
  const int64_t p0 = window_start(c0), m = n - p0;
  const int64_t panels = (hd + kPanelRows - 1) / kPanelRows;
  const int64_t keys_floats =
      static_cast<int64_t>(packed_bytes(m, hd, DType::kF32) / sizeof(float));
  const int64_t head_floats = keys_floats + panels * kPanelRows * m;
  const int pass_heads =
      static_cast<int>(std::clamp<int64_t>(kPackFloats / head_floats, 1, s.n_kv_heads));
  // Tokens a block: at most kGemmRows rows, and small enough that a pass has work for every
  // thread twice over.
  int64_t per_block = std::max<int64_t>(1, kGemmRows / group);
  const int64_t wanted = (2 * threads + pass_heads - 1) / pass_heads;
  per_block = std::max<int64_t>(1, std::min(per_block, (T + wanted - 1) / wanted));
  const int64_t blocks = (T + per_block - 1) / per_block;
  thread_local std::vector<float> packed_store;
  float* packed = aligned_floats(packed_store, pass_heads * head_floats);
  const bool parallel = T * n * int64_t{s.n_heads} * hd >= kParallelWork;
  for (int g0 = 0; g0 < s.n_kv_heads; g0 += pass_heads) {
    const int heads = std::min(pass_heads, s.n_kv_heads - g0);
#pragma omp parallel if (parallel)
    {
      thread_local RunScratch w;
#pragma omp for schedule(dynamic, 1)
      for (int g = g0; g < g0 + heads; ++g) {
        float* kp = packed + (g - g0) * head_floats;
        pack_head<KV>(kp, keys_floats, kp + keys_floats, first, p0, n, g, s);
      }
      // Items (kv head, block of tokens), the blocks that see most first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < heads * blocks; ++item) {
        const int g = g0 + static_cast<int>(item % heads);
        const int64_t b0 = (blocks - 1 - item / heads) * per_block,
                      nt = std::min(per_block, T - b0);
        const int64_t rows = nt * group,
                      nb = c0 + b0 + nt - 1;  // the positions the block's last token sees
        // ... from sb on (its first token's window, on a panel boundary): cols of them.
        const int64_t sb = window_start(c0 + b0), cols = nb - sb;
        const float* kp = packed + (g - g0) * head_floats + (sb - p0) * hd;
        const float* vp = packed + (g - g0) * head_floats + keys_floats + (sb - p0) * kPanelRows;
        float* x = aligned_floats(w.x, rows * hd);
        float* sc = aligned_floats(w.scores, rows * std::min(cols, kColTile));
        float* o = aligned_floats(w.o, rows * kPanelRows);
        float* acc = aligned_floats(w.acc, rows * hd);  // Σ P·V so far, row by row
        w.sum.assign(static_cast<size_t>(rows), 0.0f);
        w.max.assign(static_cast<size_t>(rows), -INFINITY);
        std::fill(acc, acc + rows * hd, 0.0f);
        for (int hi = 0; hi < group;
             ++hi)  // row hi · nt + i: token b0 + i, query head g · group + hi
          for (int64_t i = 0; i < nt; ++i)
            std::memcpy(x + (hi * nt + i) * hd,
                        q + (b0 + i) * q_stride + int64_t{g * group + hi} * hd,
                        static_cast<size_t>(hd) * sizeof(float));
        for (int64_t t0 = 0; t0 < cols; t0 += kColTile) {  // positions [sb + t0, + tc)
          const int64_t tc = std::min(kColTile, cols - t0);
          gemm(sc, x, rows, kp + t0 * hd, DType::kF32, tc, hd, 1);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t visible = c0 + b0 + r % nt;  // the row's token's n_ctx
            const int64_t lo = s.window > 0 ? std::max<int64_t>(0, visible - s.window) : 0;
            float rescale = 1.0f;
            const float tile_sum =
                tile_softmax_avx512(sc + r * tc, std::clamp<int64_t>(lo - sb - t0, 0, tc),
                                    std::clamp<int64_t>(visible - sb - t0, 0, tc), tc, s.scale,
                                    w.max[static_cast<size_t>(r)], rescale);
            float& sum = w.sum[static_cast<size_t>(r)];
            sum = sum * rescale + tile_sum;
            if (rescale != 1.0f)
              for (int d = 0; d < hd; ++d) acc[r * hd + d] *= rescale;
          }
          for (int64_t p = 0; p < panels; ++p) {
            const int64_t width = std::min<int64_t>(kPanelRows, hd - p * kPanelRows);
            gemm(o, sc, rows, vp + (p * m + t0) * kPanelRows, DType::kF32, width, tc,
                 1);  // the panel's positions [sb + t0, + tc)
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < width; ++j)
                acc[r * hd + p * kPanelRows + j] += o[r * width + j];
          }
        }
        for (int hi = 0; hi < group; ++hi)
          for (int64_t i = 0; i < nt; ++i) {
            const int64_t r = hi * nt + i;
            const float inv = 1.0f / w.sum[static_cast<size_t>(r)];
            float* dst = out + (b0 + i) * q_stride + int64_t{g * group + hi} * hd;
            for (int d = 0; d < hd; ++d) dst[d] = acc[r * hd + d] * inv;
          }
      }
    }
  }
}

}  // namespace

void attend_run_on_gemm(float* out, const float* q, const KvView& first, int64_t T,
                        const AttentionShape& s) {
  const auto run =
      first.dtype == DType::kBF16 ? &attend_run_gemm<uint16_t> : &attend_run_gemm<float>;
  run(out, q, first, T, s);
}

}  // namespace tpllama::ops::cpu
