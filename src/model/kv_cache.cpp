// Block tables and the pool of the paged KV cache.
#include "model/kv_cache.h"

#include "core/error.h"
#include "ops/device.h"

namespace tpllama {

uint64_t KvCache::bytes_per_block(int n_layers_local, int kv_dim_local, int block_size,
                                  DType dtype) {
  return static_cast<uint64_t>(n_layers_local) * 2 * static_cast<uint64_t>(block_size) *
         static_cast<uint64_t>(kv_dim_local) * dtype_size(dtype);
}

KvCache::KvCache(int n_layers_local, int kv_dim_local, int block_size, int n_blocks, int max_slots,
                 const DeviceContext& ctx, int max_blocks_per_slot, DType dtype)
    : ctx_(ctx),
      n_layers_(n_layers_local),
      kv_dim_(kv_dim_local),
      block_size_(block_size),
      n_blocks_(n_blocks),
      max_blocks_per_slot_(max_blocks_per_slot > 0 ? max_blocks_per_slot : n_blocks),
      dtype_(dtype),
      layer_stride_(2 * static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size) *
                    static_cast<size_t>(kv_dim_local)),
      tables_(static_cast<size_t>(max_slots)),
      is_changed_(static_cast<size_t>(max_slots), 0) {
  if (block_size < 1) fail("--kv-block-size must be at least 1, got ", block_size);
  if (n_blocks < 1) fail("the KV cache must hold at least one block, got ", n_blocks);
  TPLLAMA_CHECK(max_slots >= 1, "KV cache with ", max_slots, " slots");
  TPLLAMA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "the KV cache is f32 or bf16, not ",
                dtype_name(dtype));
  // Zeroed, and on the CPU paged in as blocks are first handed out: the pool costs what the
  // workload reaches, not the full-context size it is planned for.
  pool_ = ops::allocate_zeroed(
      ctx_, static_cast<size_t>(n_layers_local) * layer_stride_ * dtype_size(dtype));
  device_tables_ =
      ops::allocate(ctx_, static_cast<size_t>(max_slots) *
                              static_cast<size_t>(max_blocks_per_slot_) * sizeof(int32_t));
  const size_t block_bytes =
      static_cast<size_t>(block_size) * static_cast<size_t>(kv_dim_local) * dtype_size(dtype);
  blocks_per_chunk_ = static_cast<int>(std::max<size_t>(1, (size_t{2} << 20) / block_bytes));
  chunk_ready_.assign(static_cast<size_t>((n_blocks + blocks_per_chunk_ - 1) / blocks_per_chunk_),
                      0);
}

void KvCache::ready(int block) {
  const int chunk = block / blocks_per_chunk_;
  uint8_t& done = chunk_ready_[static_cast<size_t>(chunk)];
  if (done) return;
  done = 1;
  const int64_t first = int64_t{chunk} * blocks_per_chunk_,
                blocks = std::min<int64_t>(blocks_per_chunk_, n_blocks_ - first);
  for (int layer = 0; layer < n_layers_; ++layer)
    for (int which = 0; which < 2; ++which)
      ops::populate(ctx_, pool(layer, which).rows(first * block_size_, blocks * block_size_));
}

void KvCache::append_block(int slot, int block) {
  TPLLAMA_CHECK(
      slot >= 0 && static_cast<size_t>(slot) < tables_.size() && block >= 0 && block < n_blocks_,
      "append block ", block, " to slot ", slot);
  std::vector<int32_t>& t = tables_[static_cast<size_t>(slot)];
  TPLLAMA_CHECK(static_cast<int>(t.size()) < max_blocks_per_slot_, "slot ", slot, " already holds ",
                t.size(), " blocks, its most");
  ready(block);
  t.push_back(block);
  mark_changed(slot);
}

void KvCache::replace_block(int slot, int index, int block) {
  TPLLAMA_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size() && block >= 0 &&
                    block < n_blocks_ && index >= 0 &&
                    index < static_cast<int>(blocks(slot).size()),
                "replace block ", index, " of slot ", slot, " by block ", block);
  int32_t& old = tables_[static_cast<size_t>(slot)][static_cast<size_t>(index)];
  ready(block);
  const int64_t rows = block_size_;
  for (int layer = 0; layer < n_layers_; ++layer)
    for (int which = 0; which < 2; ++which) {
      const Tensor p = pool(layer, which);
      ops::copy(ctx_, p.rows(static_cast<int64_t>(block) * rows, rows),
                p.rows(static_cast<int64_t>(old) * rows, rows));
    }
  old = block;
  mark_changed(slot);
}

void KvCache::mark_changed(int slot) {
  if (is_changed_[static_cast<size_t>(slot)]) return;
  is_changed_[static_cast<size_t>(slot)] = 1;
  changed_.push_back(slot);
}

void KvCache::release(int slot) {
  TPLLAMA_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size(), "release of slot ", slot);
  tables_[static_cast<size_t>(slot)]
      .clear();  // nothing to upload: a token sees only blocks it was given
}

int64_t KvCache::row_of(int slot, int pos) const {
  const std::vector<int32_t>& t = blocks(slot);
  TPLLAMA_CHECK(pos >= 0 && pos < capacity(slot), "position ", pos, " beyond the ", t.size(),
                " blocks of slot ", slot);
  return static_cast<int64_t>(t[static_cast<size_t>(pos / block_size_)]) * block_size_ +
         pos % block_size_;
}

void KvCache::upload_tables() {
  for (int32_t slot : changed_) {
    const std::vector<int32_t>& t = tables_[static_cast<size_t>(slot)];
    auto* row = static_cast<int32_t*>(device_tables_.data()) +
                static_cast<size_t>(slot) * max_blocks_per_slot_;
    if (!t.empty())
      ops::upload(
          ctx_, Tensor(row, DType::kI32, {static_cast<int64_t>(t.size())}, device_tables_.device()),
          t.data());
    is_changed_[static_cast<size_t>(slot)] = 0;
  }
  changed_.clear();
}

Tensor KvCache::device_tables() const {
  return device_tables_.view(DType::kI32,
                             {static_cast<int64_t>(tables_.size()), max_blocks_per_slot_});
}

Tensor KvCache::pool(int layer_local, int which) const {
  TPLLAMA_CHECK(layer_local >= 0 && layer_local < n_layers_, "layer ", layer_local, " of ",
                n_layers_);
  const int64_t rows = static_cast<int64_t>(n_blocks_) * block_size_;
  const size_t offset = static_cast<size_t>(layer_local) * layer_stride_ +
                        static_cast<size_t>(which) * layer_stride_ / 2;
  return Tensor(static_cast<char*>(pool_.data()) + offset * dtype_size(dtype_), dtype_,
                {rows, kv_dim_}, pool_.device());
}

}  // namespace tpllama
