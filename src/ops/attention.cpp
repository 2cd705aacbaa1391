// Paged attention and KV-cache writes: validate, then dispatch.
#include "ops/attention.h"

#include "core/error.h"
#include "ops/cpu/attention.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

void attention(const DeviceContext& ctx, Tensor out, Tensor q, const KvBatch& kv,
               const AttentionShape& s) {
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
  TPLLAMA_CHECK(kv.tables.ndim() == 2 && kv.tables.dtype() == DType::kI32, "attention: tables ",
                kv.tables.shape_string());
  for (const Tensor* t : {&kv.seq, &kv.n_ctx})
    TPLLAMA_CHECK(t->ndim() == 1 && t->size(0) == tokens && t->dtype() == DType::kI32,
                  "attention: per-token ", t->shape_string(), " for ", tokens, " tokens");
  if (!kv.runs.empty())
    TPLLAMA_CHECK(kv.runs.ndim() == 2 && kv.runs.size(1) == 2 && kv.runs.dtype() == DType::kI32 &&
                      kv.runs.size(0) <= tokens && kv.max_run >= 1 && kv.max_run <= tokens,
                  "attention: runs ", kv.runs.shape_string(), " longest ", kv.max_run, " for ",
                  tokens, " tokens");
  if (on_gpu("attention", ctx, {&out, &q, &kv.keys, &kv.values, &kv.tables, &kv.seq, &kv.n_ctx}))
    TPLLAMA_GPU(attention(ctx, out, q, kv, s));
  require_cpu_f32("attention", {&out, &q});
  cpu::attention(out, q, kv, s);
}

void kv_write(const DeviceContext& ctx, Tensor key_pool, Tensor value_pool, Tensor k, Tensor v,
              Tensor rows) {
  TPLLAMA_CHECK(k.ndim() == 2 && key_pool.ndim() == 2 && key_pool.size(1) == k.size(1),
                "kv_write: pool ", key_pool.shape_string(), " k ", k.shape_string());
  require_2d("kv_write", value_pool, "value pool", key_pool.size(0), key_pool.size(1));
  require_2d("kv_write", v, "v", k.size(0), k.size(1));
  TPLLAMA_CHECK(rows.ndim() == 1 && rows.size(0) == k.size(0) && rows.dtype() == DType::kI32,
                "kv_write: rows ", rows.shape_string(), " for ", k.size(0), " tokens");
  require_f32("kv_write", k, "k");
  require_f32("kv_write", v, "v");
  require_kv_pools("kv_write", key_pool, value_pool);
  if (on_gpu("kv_write", ctx, {&key_pool, &value_pool, &k, &v, &rows}))
    TPLLAMA_GPU(kv_write(ctx, key_pool, value_pool, k, v, rows));
  cpu::kv_write(key_pool, value_pool, k, v, rows);
}

}  // namespace tpllama::ops
