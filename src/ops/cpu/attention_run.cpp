// The CPU attention of long prefill runs: register tiles as the GEMM's (see the comment below).
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

// A run is kRunTokens or more consecutive tokens of one sequence at consecutive positions (token i
// of the run sees c0 + i positions). Per kv head, its keys are packed as gemm.h packs a weight
// (panels of 32 positions, each dimension's 32 side by side) and its values as Vᵀ (panels of 32
// dimensions, each position's 32 side by side, positions in order). Blocks of the run's queries,
// all query heads of the group (a token's side by side), take the positions the block's last token
// sees a tile of kColTile at a time (its keys and values stay in L2 while every row of the block
// passes), and each 12 rows of the block pass over the tile 32 positions at a time, fused, the
// scores never leaving registers (the probabilities and the rows' outputs pass through L1): S =
// Q·Kᵀ (12 × 32 scores, as the GEMM's tile),
// the rows' running softmax (a row's maximum so far; its sum and output rescaled where the maximum
// grows), and O += P·V, 32 dimensions at a time; at the end O / the sum. Positions a row does not
// see (later tokens', or before its sliding window) enter with probability 0. Against products on
// the GEMM over tiles of scores in L2 (copied, softmaxed, and read back once a value panel), a
// 2,048-token chunk at 8k positions went from 160 to 138 ms a layer (12/4 heads), about 330
// GFLOP/s on two threads where the f32 GEMM gives 370 at 240 rows (scripts/bench/attention.sh,
// tests/bench/gemm_rows_bench).
constexpr int64_t kBlockRows = 240;  // query rows a block at most
constexpr int64_t kColTile = 512;    // positions a tile (a multiple of kPanelRows)
// Working memory is bounded whatever the context: kv heads are packed in passes of at most
// kPackFloats.
constexpr int64_t kPackFloats = int64_t{16} << 20;  // 64 MiB

// A float buffer of at least n elements, 64-byte aligned (the packed keys and values), reusing v.
float* aligned_floats(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n) + 16);
  const auto misalign = reinterpret_cast<uintptr_t>(v.data()) % 64;
  return v.data() + (misalign == 0 ? 0 : (64 - misalign) / sizeof(float));
}

// Query rows a micro-kernel: 12 rows × 32 positions of scores, or 12 rows × 32 dimensions of
// output, are 24 registers.
constexpr int kMicroRows = 12;

// The running softmax of a block's rows (row r: its scores' maximum so far, scale-free, -inf before
// any; its sum as 16 lane sums; its output Σ p·v so far, `width` floats) and the probabilities of
// the micro-kernel's tile.
struct RunScratch {
  std::vector<float> q, o, max, sum, p;
  std::vector<int64_t> from, to;  // the positions each row sees
};

// a[r] += Σ_i x[r · x_step + i] · (row i of a 32-wide panel) for r < kMicroRows, i < n: the GEMM's
// register tile, each panel row read once for all 12 rows and each x broadcast once. Scores take
// it with q and a key panel (i: a dimension), outputs with the probabilities and a Vᵀ panel (i: a
// position).
__attribute__((target("avx512f"), always_inline)) inline void micro_update(
    __m512 (&a)[kMicroRows][2], const float* x, int x_step, const float* panel, int n) {
  for (int i = 0; i < n; ++i) {
    const __m512 v0 = _mm512_load_ps(panel + i * kPanelRows),
                 v1 = _mm512_load_ps(panel + i * kPanelRows + 16);
    for (int r = 0; r < kMicroRows; ++r) {
      const __m512 b = _mm512_set1_ps(x[r * x_step + i]);
      a[r][0] = _mm512_fmadd_ps(b, v0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(b, v1, a[r][1]);
    }
  }
}

// Rows [0, kMicroRows) of o (stride width) += p (kMicroRows × 32) · the `n` (<= 32) positions'
// values of a Vᵀ panel (32 dimensions a position, positions in order).
__attribute__((target("avx512f"))) void micro_values(float* o, int width, const float* p,
                                                     const float* values, int n) {
  __m512 a[kMicroRows][2];
  for (int r = 0; r < kMicroRows; ++r) {
    a[r][0] = _mm512_loadu_ps(o + r * width);
    a[r][1] = _mm512_loadu_ps(o + r * width + 16);
  }
  micro_update(a, p, kPanelRows, values, n);
  for (int r = 0; r < kMicroRows; ++r) {
    _mm512_storeu_ps(o + r * width, a[r][0]);
    _mm512_storeu_ps(o + r * width + 16, a[r][1]);
  }
}

// The positions of a 32-position tile that a row sees, [lo, hi) of it, as lane masks of its two
// vectors.
inline void seen_lanes(int64_t lo, int64_t hi, __mmask16& m0, __mmask16& m1) {
  const auto bits_below = [](int64_t n) {
    return n <= 0 ? uint32_t{0} : n >= 32 ? ~uint32_t{0} : (uint32_t{1} << n) - 1;
  };
  const uint32_t seen = bits_below(hi) & ~bits_below(lo);
  m0 = static_cast<__mmask16>(seen & 0xFFFF);
  m1 = static_cast<__mmask16>(seen >> 16);
}

// One micro-block's tile: rows [0, kMicroRows) of the block's state at w (q, o, max, sum from row
// r0 on), the tile's 32 positions from `from` (relative to the block's first position), key panel
// `keys` and Vᵀ panels from `values` (panel j at values + j · panel_floats); row r sees positions
// [lo[r], hi[r]) (relative, as `from`). Scores, the rows' running softmax (a row's sum and output
// rescaled where its maximum grows), then the output += the probabilities · values, panel by
// panel. Positions a row does not see enter with probability 0.
__attribute__((target("avx512f"))) void micro_tile(RunScratch& w, int64_t r0, int hd, int width,
                                                   const float* keys, const float* values,
                                                   int64_t panel_floats, int64_t from,
                                                   const int64_t* lo, const int64_t* hi, int n,
                                                   float scale) {
  __m512 s[kMicroRows][2];  // the rows' scale-free scores, from one read of the key panel
  for (auto& row : s) row[0] = row[1] = _mm512_setzero_ps();
  micro_update(s, w.q.data() + r0 * hd, hd, keys, hd);
  float* p = w.p.data();
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r = 0; r < kMicroRows; ++r) {
    __mmask16 m0, m1;
    seen_lanes(lo[r] - from, hi[r] - from, m0, m1);
    float* pr = p + r * kPanelRows;
    if ((m0 | m1) == 0) {
      _mm512_storeu_ps(pr, _mm512_setzero_ps());
      _mm512_storeu_ps(pr + 16, _mm512_setzero_ps());
      continue;
    }
    const __m512 none = _mm512_set1_ps(-INFINITY);
    const float tile_max = _mm512_reduce_max_ps(_mm512_max_ps(
        _mm512_mask_mov_ps(none, m0, s[r][0]), _mm512_mask_mov_ps(none, m1, s[r][1])));
    float& mx = w.max[static_cast<size_t>(r0 + r)];
    float* sum = w.sum.data() + (r0 + r) * 16;
    float* o = w.o.data() + (r0 + r) * width;
    if (tile_max > mx) {
      const float rescale = mx == -INFINITY ? 0.0f : std::exp(scale * (mx - tile_max));
      const __m512 f = _mm512_set1_ps(rescale);
      _mm512_storeu_ps(sum, _mm512_mul_ps(_mm512_loadu_ps(sum), f));
      for (int d = 0; d < width; d += 16)
        _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), f));
      mx = tile_max;
    }
    const __m512 m = _mm512_set1_ps(mx);
    const __m512 p0 =
        _mm512_maskz_mov_ps(m0, exp_avx512(_mm512_mul_ps(_mm512_sub_ps(s[r][0], m), sc)));
    const __m512 p1 =
        _mm512_maskz_mov_ps(m1, exp_avx512(_mm512_mul_ps(_mm512_sub_ps(s[r][1], m), sc)));
    _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), _mm512_add_ps(p0, p1)));
    _mm512_storeu_ps(pr, p0);
    _mm512_storeu_ps(pr + 16, p1);
  }
  for (int j = 0; j * kPanelRows < width; ++j)
    micro_values(w.o.data() + r0 * width + j * kPanelRows, width, p, values + j * panel_floats, n);
}

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
void attend_run_tiled(float* out, const float* q, const KvView& first, int64_t T,
                      const AttentionShape& s) {
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads, threads = omp_get_max_threads();
  const int64_t q_stride = int64_t{s.n_heads} * hd;
  const int64_t c0 = first.n_ctx, n = c0 + T - 1;  // the positions the run's last token sees
  // Under a sliding window no token of the run sees a position before its first token's window:
  // only [p0, n) is packed, p0 on a panel boundary (and each block of tokens below reads from its
  // own first token's window on), so the products cover the window, not the whole context.
  const auto window_start = [&s](int64_t n_ctx) {
    return first_seen(n_ctx, s) / kPanelRows * kPanelRows;
  };
  const int64_t p0 = window_start(c0), m = n - p0;
  const int64_t panels = (hd + kPanelRows - 1) / kPanelRows;
  const int64_t keys_floats =
      static_cast<int64_t>(packed_bytes(m, hd, DType::kF32) / sizeof(float));
  const int64_t head_floats = keys_floats + panels * kPanelRows * m;
  const int pass_heads =
      static_cast<int>(std::clamp<int64_t>(kPackFloats / head_floats, 1, s.n_kv_heads));
  // Tokens a block: at most kBlockRows rows, and small enough that a pass has work for every
  // thread twice over.
  int64_t per_block = std::max<int64_t>(1, kBlockRows / group);
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
        const int64_t rows = nt * group, padded = (rows + kMicroRows - 1) / kMicroRows * kMicroRows,
                      nb = c0 + b0 + nt - 1;  // the positions the block's last token sees
        // ... from sb on (its first token's window, on a panel boundary): cols of them.
        const int64_t sb = window_start(c0 + b0), cols = nb - sb;
        const float* kp = packed + (g - g0) * head_floats + (sb - p0) * hd;
        const float* vp = packed + (g - g0) * head_floats + keys_floats + (sb - p0) * kPanelRows;
        const int width = static_cast<int>(panels * kPanelRows);
        w.q.assign(static_cast<size_t>(padded * hd), 0.0f);
        w.o.assign(static_cast<size_t>(padded * width), 0.0f);
        w.max.assign(static_cast<size_t>(padded), -INFINITY);
        w.sum.assign(static_cast<size_t>(padded * 16), 0.0f);
        w.p.resize(static_cast<size_t>(kMicroRows * kPanelRows));
        // Rows past `rows` see nothing (and widen no micro-block's span of positions).
        w.from.assign(static_cast<size_t>(padded), cols);
        w.to.assign(static_cast<size_t>(padded), 0);
        // Row i · group + hi: token b0 + i, query head g · group + hi (a token's rows side by
        // side, so a micro-block's rows see nearly the same positions); it sees [from, to).
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = r / group, visible = c0 + b0 + i;  // the row's token's n_ctx
          std::memcpy(w.q.data() + r * hd, q + (b0 + i) * q_stride + (g * group + r % group) * hd,
                      static_cast<size_t>(hd) * sizeof(float));
          w.from[static_cast<size_t>(r)] = first_seen(visible, s) - sb;
          w.to[static_cast<size_t>(r)] = visible - sb;
        }
        for (int64_t t0 = 0; t0 < cols; t0 += kColTile) {  // positions [sb + t0, + tc)
          const int64_t tc = std::min(kColTile, cols - t0);
          for (int64_t r0 = 0; r0 < padded; r0 += kMicroRows) {
            const auto rb = w.from.begin() + r0, re = w.to.begin() + r0;
            // The tile's 32-position panels any of the micro-block's rows sees.
            const int64_t seen_from = std::max(*std::min_element(rb, rb + kMicroRows), t0),
                          seen_to = std::min(*std::max_element(re, re + kMicroRows), t0 + tc);
            for (int64_t t = t0 + (seen_from - t0) / kPanelRows * kPanelRows; t < seen_to;
                 t += kPanelRows)
              micro_tile(w, r0, hd, width, kp + t * hd, vp + t * kPanelRows, m * kPanelRows, t,
                         w.from.data() + r0, w.to.data() + r0,
                         static_cast<int>(std::min<int64_t>(kPanelRows, cols - t)), s.scale);
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          float total = 0.0f;
          for (int l = 0; l < 16; ++l) total += w.sum[static_cast<size_t>(r * 16 + l)];
          const float inv = 1.0f / total;
          float* dst = out + (b0 + r / group) * q_stride + (g * group + r % group) * hd;
          for (int d = 0; d < hd; ++d) dst[d] = w.o[static_cast<size_t>(r * width + d)] * inv;
        }
      }
    }
  }
}

}  // namespace

void attend_run(float* out, const float* q, const KvView& first, int64_t T,
                const AttentionShape& s) {
  const auto run =
      first.dtype == DType::kBF16 ? &attend_run_tiled<uint16_t> : &attend_run_tiled<float>;
  run(out, q, first, T, s);
}

}  // namespace tpllama::ops::cpu
