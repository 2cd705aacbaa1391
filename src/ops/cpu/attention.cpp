// The CPU attention: the choice of kernel and the order of work items, and the portable kernel,
// the reference the AVX-512 ones (attention_avx512.cpp, attention_run.cpp) are tested against.
#include "ops/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "ops/cpu/attention_kernels.h"

namespace tpllama::ops::cpu {

namespace {

// One (token, head) of attention, portable: the reference the AVX-512 kernel is tested against.
template <typename KV>
void attend_portable(float* o, const float* qh, const KvView& v, int64_t kv_stride, int64_t kv_off,
                     const AttentionShape& s, float* scores) {
  const int hd = s.head_dim, bs = s.block_size;
  auto row_of = [&](int t) {
    return (static_cast<int64_t>(v.blocks[t / bs]) * bs + t % bs) * kv_stride + kv_off;
  };
  float max_score = -INFINITY;
  for (int t = first_seen(v, s); t < v.n_ctx; ++t) {  // scores = q·k / sqrt(head_dim)
    const KV* k = static_cast<const KV*>(v.keys) + row_of(t);
    float dot = 0;
#pragma omp simd reduction(+ : dot)  // lets the compiler reorder the sum into vector lanes
    for (int i = 0; i < hd; ++i) dot += qh[i] * as_f32(k[i]);
    scores[t] = dot * s.scale;
    max_score = std::max(max_score, scores[t]);
  }
  float sum = 0;  // softmax over the context
  for (int t = first_seen(v, s); t < v.n_ctx; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  std::fill(o, o + hd, 0.0f);  // weighted sum of values
  const float inv_sum = 1.0f / sum;
  for (int t = first_seen(v, s); t < v.n_ctx; ++t) {
    const float p = scores[t] * inv_sum;
    const KV* val = static_cast<const KV*>(v.values) + row_of(t);
#pragma omp simd
    for (int i = 0; i < hd; ++i) o[i] += p * as_f32(val[i]);
  }
}

// Whether tokens a and b of a step read one table of one pool (one sequence).
bool same_sequence(const std::vector<KvView>& kv, int64_t a, int64_t b) {
  const KvView &x = kv[static_cast<size_t>(a)], &y = kv[static_cast<size_t>(b)];
  return x.blocks == y.blocks && x.keys == y.keys && x.values == y.values;
}

// Runs of kRunTokens or more tokens (one sequence, consecutive positions) attend together
// (attention_run.cpp); returns which tokens they took.
std::vector<char> attend_runs(Tensor out, Tensor q, const std::vector<KvView>& kv,
                              const AttentionShape& s) {
  const int64_t n_tokens = static_cast<int64_t>(kv.size()),
                q_stride = int64_t{s.n_heads} * s.head_dim;
  std::vector<char> in_runs(static_cast<size_t>(n_tokens), 0);
  for (int64_t m = 0, e = 0; m < n_tokens; m = e) {
    for (e = m + 1; e < n_tokens && same_sequence(kv, e - 1, e) &&
                    kv[static_cast<size_t>(e)].n_ctx == kv[static_cast<size_t>(e - 1)].n_ctx + 1;
         ++e) {
    }
    if (e - m < kRunTokens) continue;
    attend_run(out.as<float>() + m * q_stride, q.as<float>() + m * q_stride,
               kv[static_cast<size_t>(m)], e - m, s);
    std::fill(in_runs.begin() + m, in_runs.begin() + e, 1);
  }
  return in_runs;
}

// The tokens not in such runs, with the AVX-512 kernel (and its pair kernel), as work items in the
// order that keeps what consecutive items read in each core's L2: for prefill chunks (most tokens
// continue the previous token's sequence) one kv head's tokens in turn, two tokens of a sequence an
// item, which share that head's keys and values (a 1000-token prompt: 1.17x for the order); for
// decode (a sequence per token) a token's kv heads together in one item, which reads its cache rows
// a tile ahead and sums several heads' values side by side (spans of fewer kv heads only where
// the step has too few tokens to keep every thread busy).
void attend_tokens(Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& s,
                   const std::vector<char>& in_runs, AttendFn kernel, int max_ctx) {
  const int64_t n_tokens = static_cast<int64_t>(kv.size()),
                q_stride = int64_t{s.n_heads} * s.head_dim;
  int64_t rest = 0, continued = 0,
          work = 0;  // work: multiply-adds, whether threads pay for themselves
  for (int64_t m = 0; m < n_tokens; ++m) {
    if (in_runs[static_cast<size_t>(m)]) continue;
    ++rest;
    continued += m > 0 && !in_runs[static_cast<size_t>(m - 1)] && same_sequence(kv, m - 1, m);
    work += static_cast<int64_t>(kv[static_cast<size_t>(m)].n_ctx -
                                 first_seen(kv[static_cast<size_t>(m)], s)) *
            s.n_heads * s.head_dim * 2;
  }
  if (rest == 0) return;
  const bool by_head = 2 * continued > rest;
  // The pair kernel reads both tokens' contexts from position 0: not under a sliding window.
  const AttendPairFn pair =
      by_head && s.window == 0 ? attend_pair_kernel(s.head_dim, kv[0].dtype) : nullptr;
  std::vector<int64_t> units;  // first token of each unit: one token, or two of one sequence
  std::vector<char> paired;    // whether the unit is two tokens
  for (int64_t m = 0; m < n_tokens; ++m) {
    if (in_runs[static_cast<size_t>(m)]) continue;
    units.push_back(m);
    paired.push_back(pair != nullptr && m + 1 < n_tokens && !in_runs[static_cast<size_t>(m + 1)] &&
                     same_sequence(kv, m, m + 1));
    m += paired.back();
  }
  const int64_t n_units = static_cast<int64_t>(units.size());
  // kv heads an item: one for prefill's order; for decode, all of a token's unless that leaves
  // fewer than four items a thread.
  const int64_t parts =
      by_head ? s.n_kv_heads
              : std::clamp<int64_t>((4 * int64_t{omp_get_max_threads()} + n_units - 1) / n_units, 1,
                                    s.n_kv_heads);
  const int span = static_cast<int>((s.n_kv_heads + parts - 1) / parts),
            n_spans = (s.n_kv_heads + span - 1) / span;
  const int64_t items = n_units * n_spans;
#pragma omp parallel if (work >= kParallelWork)
  {
    const size_t padded =
        static_cast<size_t>(max_ctx + 15) / 16 * 16;  // scores are written 16 at a time
    const size_t group = static_cast<size_t>(s.n_heads / s.n_kv_heads);
    // A row of scores a query head of the item's kv heads; kept by the thread from call to call
    // (a decode step calls once a layer), grown where a call needs more.
    thread_local AttendScratch w;
    w.fit(padded, padded * group * static_cast<size_t>(span), pair != nullptr ? padded : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < items; ++i) {
      const int64_t u = by_head ? i % n_units : i / n_spans;
      const int g = static_cast<int>(by_head ? i / n_units : i % n_spans) * span;
      const int64_t m = units[static_cast<size_t>(u)];
      float* o = out.as<float>() + m * q_stride;
      const float* qm = q.as<float>() + m * q_stride;
      if (paired[static_cast<size_t>(u)])
        pair(o, o + q_stride, qm, qm + q_stride, kv[static_cast<size_t>(m)],
             kv[static_cast<size_t>(m + 1)], s, g, w);
      else
        kernel(o, qm, kv[static_cast<size_t>(m)], s, g, std::min(g + span, s.n_kv_heads), w);
    }
  }
}

}  // namespace

void attention(Tensor out, Tensor q, const std::vector<KvView>& kv, const AttentionShape& s) {
  const int64_t n_tokens = static_cast<int64_t>(kv.size());
  const int hd = s.head_dim;
  const int group = s.n_heads / s.n_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(s.n_kv_heads) * hd;
  const int64_t q_stride = static_cast<int64_t>(s.n_heads) * hd;
  int max_ctx = 0;
  int64_t work = 0;  // multiply-adds, to decide whether threads pay for themselves
  for (const KvView& v : kv) {
    max_ctx = std::max(max_ctx, v.n_ctx);
    work += static_cast<int64_t>(v.n_ctx - first_seen(v, s)) * s.n_heads * hd * 2;
  }
  const DType kv_dtype = kv.empty() ? DType::kF32 : kv[0].dtype;
  for (const KvView& v : kv)
    TPLLAMA_CHECK(v.dtype == kv_dtype, "attention: tokens of one step read one cache");
  if (const AttendFn kernel = attend_kernel(hd, kv_dtype); kernel != nullptr) {
    attend_tokens(out, q, kv, s, attend_runs(out, q, kv, s), kernel, max_ctx);
    return;
  }
  const auto portable =
      kv_dtype == DType::kBF16 ? &attend_portable<uint16_t> : &attend_portable<float>;
#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<float> scores(static_cast<size_t>(max_ctx));
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t m = 0; m < n_tokens; ++m)
      for (int h = 0; h < s.n_heads; ++h)
        portable(out.as<float>() + m * q_stride + h * hd, q.as<float>() + m * q_stride + h * hd,
                 kv[static_cast<size_t>(m)], kv_stride, static_cast<int64_t>(h / group) * hd, s,
                 scores.data());
  }
}

void attention(Tensor out, Tensor q, const KvBatch& kv, const AttentionShape& s) {
  const int64_t tokens = q.size(0);
  const int64_t max_blocks = kv.tables.size(1), pool_rows = kv.keys.size(0);
  std::vector<KvView> views(static_cast<size_t>(tokens));
  std::vector<int64_t> checked(static_cast<size_t>(kv.tables.size(0)),
                               0);  // table entries checked, per row
  for (int64_t m = 0; m < tokens; ++m) {
    const int32_t seq = kv.seq.as<int32_t>()[m], n_ctx = kv.n_ctx.as<int32_t>()[m];
    TPLLAMA_CHECK(
        seq >= 0 && seq < kv.tables.size(0) && n_ctx > 0 && n_ctx <= max_blocks * s.block_size,
        "attention: token ", m, " of sequence row ", seq, " sees ", n_ctx, " positions");
    const int32_t* blocks = kv.tables.as<int32_t>() + seq * max_blocks;
    int64_t& done =
        checked[static_cast<size_t>(seq)];  // a prefill chunk's tokens share their table
    for (; done < (n_ctx + s.block_size - 1) / s.block_size; ++done)
      TPLLAMA_CHECK(blocks[done] >= 0 && (blocks[done] + int64_t{1}) * s.block_size <= pool_rows,
                    "attention: block ", blocks[done], " outside the pool of ", pool_rows, " rows");
    views[static_cast<size_t>(m)] = {kv.keys.data(), kv.values.data(), blocks, n_ctx,
                                     kv.keys.dtype()};
  }
  attention(out, q, views, s);
}

void kv_write(Tensor key_pool, Tensor value_pool, Tensor k, Tensor v, Tensor rows) {
  const int64_t width = k.size(1);
  const bool bf16 = key_pool.dtype() == DType::kBF16;
  for (int64_t m = 0; m < k.size(0); ++m) {
    const int64_t r = rows.as<int32_t>()[m];
    TPLLAMA_CHECK(r >= 0 && r < key_pool.size(0), "kv_write: row ", r, " outside the pool of ",
                  key_pool.size(0));
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

}  // namespace tpllama::ops::cpu
