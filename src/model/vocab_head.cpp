// The vocab-parallel head: logit edits, argmax, draws and log-probabilities over the TP group's
// vocabulary shards.
#include "model/vocab_head.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/device.h"
#include "ops/rows.h"
#include "ops/sampling.h"

namespace tpllama {

VocabParallelHead::VocabParallelHead(const LlamaModel& model, Communicator& tp_comm)
    : model_(model), tp_comm_(tp_comm) {
  const DeviceContext& ctx = model.context();
  const size_t rows = static_cast<size_t>(model.limits().max_logit_rows);
  if (ctx.device != Device::kCpu)
    host_row_ = Buffer(static_cast<size_t>(model.vocab_local()) * sizeof(float));
  argmax_index_ = ops::allocate(ctx, rows * sizeof(int32_t));
  argmax_value_ = ops::allocate(ctx, rows * sizeof(float));
  logprob_rows_ = ops::allocate(ctx, rows * sizeof(int32_t));
  logprob_max_ = ops::allocate(ctx, rows * sizeof(float));
  logprob_chosen_ = ops::allocate(ctx, rows * sizeof(int32_t));
  logprob_sums_ = ops::allocate(ctx, 2 * rows * sizeof(float));
  const size_t tp = static_cast<size_t>(tp_comm.size()),
               chunk = static_cast<size_t>(model.limits().max_sample_rows);
  const size_t row_bytes = static_cast<size_t>(model.vocab_local()) * sizeof(float);
  sample_index_ = ops::allocate(ctx, tp * chunk * sizeof(int32_t));
  sample_whole_ = ops::allocate(ctx, tp * chunk * row_bytes);
  if (tp > 1) sample_gathered_ = ops::allocate(ctx, tp * chunk * row_bytes);
  edit_cells_ = ops::allocate(ctx, 2 * kEditChunk * sizeof(int32_t));
  edit_params_ = ops::allocate(ctx, 3 * kEditChunk * sizeof(float));
  mask_width_ = (static_cast<int64_t>(model.config().vocab_size) + 31) / 32;
  mask_rows_ = ops::allocate(ctx, rows * sizeof(int32_t));
  mask_words_ = ops::allocate(ctx, rows * static_cast<size_t>(mask_width_) * sizeof(uint32_t));
}

SampledTokens VocabParallelHead::sample(const std::vector<RowSampling>& rows,
                                        const std::vector<LogitEdit>& edits,
                                        const TokenMasks& masks, const Tensor& logits) {
  SampledTokens out;
  apply_edits(edits, logits);
  apply_masks(masks, logits);
  local_argmax(logits);
  out.tokens = draw(rows, logits);
  out.logprobs = row_logprobs(rows, logits, out.tokens);
  return out;
}

void VocabParallelHead::apply_edits(const std::vector<LogitEdit>& edits, const Tensor& logits) {
  const int begin = model_.vocab_begin(), v_local = model_.vocab_local();
  std::vector<int32_t> cells;
  std::vector<float> params;
  for (const LogitEdit& e : edits) {
    TPLLAMA_CHECK(e.row >= 0 && e.row < logits.size(0), "logit edit of row ", e.row, " for ",
                  logits.size(0), " logit rows");
    const int local = e.token - begin;
    if (local < 0 || local >= v_local) continue;  // another rank's slice
    cells.insert(cells.end(), {e.row, local});
    params.insert(params.end(), {e.bias, e.scale, e.subtract});
  }
  const DeviceContext& ctx = model_.context();
  const int64_t n = static_cast<int64_t>(cells.size() / 2);
  for (int64_t first = 0; first < n; first += kEditChunk) {
    const int64_t m = std::min(kEditChunk, n - first);
    const Tensor cells_in = edit_cells_.view(DType::kI32, {m, 2}),
                 params_in = edit_params_.view(DType::kF32, {m, 3});
    ops::upload(ctx, cells_in, cells.data() + 2 * first);
    ops::upload(ctx, params_in, params.data() + 3 * first);
    ops::edit_logits(ctx, logits, cells_in, params_in);
  }
}

void VocabParallelHead::apply_masks(const TokenMasks& masks, const Tensor& logits) {
  if (masks.empty()) return;
  const int64_t n = static_cast<int64_t>(masks.rows.size());
  TPLLAMA_CHECK(masks.width == mask_width_ && n <= logits.size(0) &&
                    masks.words.size() == static_cast<size_t>(n * mask_width_),
                "grammar masks of ", n, " rows of ", masks.width, " words for ", logits.size(0),
                " logit rows of ", mask_width_);
  for (const int32_t row : masks.rows)
    TPLLAMA_CHECK(row >= 0 && row < logits.size(0), "grammar mask of row ", row);
  const DeviceContext& ctx = model_.context();
  const Tensor rows_in = mask_rows_.view(DType::kI32, {n}),
               words_in = mask_words_.view(DType::kI32, {n, mask_width_});
  ops::upload(ctx, rows_in, masks.rows.data());
  ops::upload(ctx, words_in, masks.words.data());
  ops::mask_logits(ctx, logits, rows_in, words_in, model_.vocab_begin());
}

void VocabParallelHead::local_argmax(const Tensor& logits) {
  const DeviceContext& ctx = model_.context();
  const int64_t r = logits.size(0);
  local_max_index_.resize(static_cast<size_t>(r));
  local_max_value_.resize(static_cast<size_t>(r));
  if (r == 0) return;
  Tensor index = argmax_index_.view(DType::kI32, {r}), value = argmax_value_.view(DType::kF32, {r});
  ops::argmax_rows(ctx, index, value, logits);
  ops::download(ctx, local_max_index_.data(), index);
  ops::download(ctx, local_max_value_.data(), value);
}

// The maximum logit of each given row and its token id over the whole vocabulary: each rank's
// shard argmax, reduced across the TP group (ties to the lowest id).
void VocabParallelHead::reduce_argmax(const std::vector<size_t>& rows, std::vector<float>* values,
                                      std::vector<int32_t>* indices) {
  values->resize(rows.size());
  indices->resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    (*values)[i] = local_max_value_[rows[i]];
    const int32_t local = local_max_index_[rows[i]];
    (*indices)[i] = local < 0 ? kNonFiniteRow : model_.vocab_begin() + local;
  }
  tp_comm_.all_reduce_argmax(*values, *indices);
}

const float* VocabParallelHead::host_row(const Tensor& logits, int64_t r) {
  const int64_t cols = logits.size(1);
  if (logits.device() == Device::kCpu) return logits.as<float>() + r * cols;
  const Tensor row(static_cast<float*>(logits.data()) + r * cols, DType::kF32, {cols},
                   logits.device());
  ops::download(model_.context(), host_row_.data(), row);
  return static_cast<const float*>(host_row_.data());
}

// Greedy rows: argmax of each TP shard, reduced across the group (no logits move). Sampled rows:
// the shards are gathered into whole rows, then every TP rank draws the same token with the
// uniform rank 0 drew (ops::sample_rows: on a GPU, sorted and drawn there). Every row's argmax is
// reduced, so that a row with a NaN or +inf on any shard is kNonFiniteRow on every TP rank and is
// never drawn from (a draw from it would fail the whole job).
std::vector<int32_t> VocabParallelHead::draw(const std::vector<RowSampling>& sampling,
                                             const Tensor& device_logits) {
  const size_t rows = sampling.size();
  const int v_local = model_.vocab_local();
  std::vector<size_t> all(rows);
  for (size_t r = 0; r < rows; ++r) all[r] = r;
  std::vector<float> values;
  std::vector<int32_t> tokens;
  reduce_argmax(all, &values, &tokens);
  std::vector<size_t> sampled;
  for (size_t r = 0; r < rows; ++r)
    if (sampling[r].params.temperature != 0.0 && tokens[r] != kNonFiniteRow) sampled.push_back(r);

  // Sampled rows, a chunk at a time: this shard's rows, gathered across the TP group and laid out
  // as whole rows, then drawn on the model's device; only the token ids come back.
  const DeviceContext& ctx = model_.context();
  const int tp = tp_comm_.size();
  const size_t chunk = static_cast<size_t>(model_.limits().max_sample_rows);
  for (size_t first = 0; first < sampled.size(); first += chunk) {
    const int64_t s = static_cast<int64_t>(std::min(chunk, sampled.size() - first));
    std::vector<int32_t> index(sampled.begin() + static_cast<std::ptrdiff_t>(first),
                               sampled.begin() + static_cast<std::ptrdiff_t>(first) + s);
    Tensor rows_of = sample_index_.view(DType::kI32, {s});
    ops::upload(ctx, rows_of, index.data());
    Tensor whole = sample_whole_.view(DType::kF32, {s, v_local});
    ops::gather_rows(ctx, whole, device_logits, rows_of);
    if (tp > 1) {
      // The gather puts shard t's row i at row t*s + i; whole row i is shard 0's row i, then shard
      // 1's...
      Tensor gathered = sample_gathered_.view(DType::kF32, {tp * s, v_local});
      tp_comm_.all_gather(whole, gathered);
      index.resize(static_cast<size_t>(tp * s));
      for (int64_t i = 0; i < s; ++i)
        for (int t = 0; t < tp; ++t)
          index[static_cast<size_t>(i * tp + t)] = static_cast<int32_t>(t * s + i);
      rows_of = sample_index_.view(DType::kI32, {tp * s});
      ops::upload(ctx, rows_of, index.data());
      whole = sample_whole_.view(DType::kF32, {tp * s, v_local});
      ops::gather_rows(ctx, whole, gathered, rows_of);
    }
    std::vector<ops::SampleRow> draws(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) {
      const RowSampling& rs = sampling[sampled[first + static_cast<size_t>(i)]];
      draws[static_cast<size_t>(i)] = {rs.params, rs.uniform};
    }
    const std::vector<int32_t> drawn = ops::sample_rows(
        ctx, whole.reshape({s, tp * int64_t{v_local}}), model_.config().vocab_size, draws);
    for (int64_t i = 0; i < s; ++i)
      tokens[sampled[first + static_cast<size_t>(i)]] = drawn[static_cast<size_t>(i)];
  }
  return tokens;
}

// This shard's part of the log-softmax of the given rows, computed where the logits are: [0, n) the
// sums of exp(logit - max), [n, 2n) the chosen token's logit (0 on ranks without it). Only these 2n
// numbers reach the host.
std::vector<float> VocabParallelHead::local_sums(const std::vector<RowSampling>& sampling,
                                                 const std::vector<size_t>& rows,
                                                 const std::vector<float>& max_value,
                                                 const Tensor& device_logits,
                                                 const std::vector<int32_t>& tokens) {
  const int v_local = model_.vocab_local(), begin = model_.vocab_begin();
  const int64_t n = static_cast<int64_t>(rows.size());
  const DeviceContext& ctx = model_.context();
  std::vector<int32_t> row_index(rows.size()), chosen(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    row_index[i] = static_cast<int32_t>(rows[i]);
    const int32_t target = sampling[rows[i]].target;
    const int local = (target >= 0 ? target : tokens[rows[i]]) - begin;
    chosen[i] = local >= 0 && local < v_local ? local : -1;
  }
  const Tensor rows_in = logprob_rows_.view(DType::kI32, {n}),
               max_in = logprob_max_.view(DType::kF32, {n});
  const Tensor chosen_in = logprob_chosen_.view(DType::kI32, {n}),
               sums_out = logprob_sums_.view(DType::kF32, {2 * n});
  ops::upload(ctx, rows_in, row_index.data());
  ops::upload(ctx, max_in, max_value.data());
  ops::upload(ctx, chosen_in, chosen.data());
  ops::logit_sums(ctx, sums_out, device_logits, rows_in, max_in, chosen_in);
  std::vector<float> sums(static_cast<size_t>(2 * n));
  ops::download(ctx, sums.data(), sums_out);
  return sums;
}

// This shard's top_n candidates (logit, token id) of each row that asks for top alternatives, at
// [i * top_n, (i + 1) * top_n) for row i; -inf and -1 where there are none.
void VocabParallelHead::local_top(const std::vector<RowSampling>& sampling,
                                  const std::vector<size_t>& rows,
                                  const std::vector<int32_t>& max_index, int top_n,
                                  const Tensor& device_logits, std::vector<float>* values,
                                  std::vector<int32_t>* ids) {
  const int v_local = model_.vocab_local(), begin = model_.vocab_begin();
  values->assign(rows.size() * static_cast<size_t>(top_n), -INFINITY);
  ids->assign(rows.size() * static_cast<size_t>(top_n), -1);
  const int k = std::min(top_n, v_local);
  std::vector<int32_t> order(static_cast<size_t>(v_local));
  for (size_t i = 0; k > 0 && i < rows.size(); ++i) {
    // A non-finite row has no order to sort by (its request ends with an error).
    if (sampling[rows[i]].logprobs <= 0 || max_index[i] == kNonFiniteRow) continue;
    const float* row = host_row(device_logits, static_cast<int64_t>(rows[i]));
    for (int v = 0; v < v_local; ++v) order[static_cast<size_t>(v)] = v;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int j = 0; j < k; ++j) {
      (*values)[i * static_cast<size_t>(top_n) + static_cast<size_t>(j)] =
          row[order[static_cast<size_t>(j)]];
      (*ids)[i * static_cast<size_t>(top_n) + static_cast<size_t>(j)] =
          begin + order[static_cast<size_t>(j)];
    }
  }
}

// Of each row that asks for a target's rank, the logits of the whole vocabulary above the
// target's (sums[n + i], already reduced): counted on each shard's slice, then summed (exact in
// f32 below 2^24 tokens). Empty when no row asks, and then no rank of the group reduces.
std::vector<float> VocabParallelHead::logits_above_target(const std::vector<RowSampling>& sampling,
                                                          const std::vector<size_t>& rows,
                                                          const std::vector<float>& sums,
                                                          const Tensor& device_logits) {
  if (std::none_of(rows.begin(), rows.end(), [&](size_t r) { return ranked(sampling[r]); }))
    return {};
  const int v_local = model_.vocab_local();
  std::vector<float> above(rows.size(), 0.0f);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!ranked(sampling[rows[i]])) continue;
    const float target = sums[rows.size() + i];
    const float* row = host_row(device_logits, static_cast<int64_t>(rows[i]));
    above[i] = static_cast<float>(
        std::count_if(row, row + v_local, [target](float x) { return x > target; }));
  }
  tp_comm_.all_reduce_sum(Tensor(above.data(), DType::kF32, {static_cast<int64_t>(above.size())}));
  return above;
}

// Log-softmax across the TP shards without gathering the rows: the maximum and the sum of
// exponentials are reduced, the chosen token's logit comes from the rank that holds it, and each
// rank's top-N candidates are gathered (N per rank, not the vocabulary).
std::vector<RowLogprobs> VocabParallelHead::row_logprobs(const std::vector<RowSampling>& sampling,
                                                         const Tensor& device_logits,
                                                         const std::vector<int32_t>& tokens) {
  std::vector<size_t> rows;
  int top_n = 0;
  for (size_t r = 0; r < sampling.size(); ++r)
    if (sampling[r].logprobs >= 0 || sampling[r].target >= 0) {
      rows.push_back(r);
      top_n = std::max(top_n, static_cast<int>(sampling[r].logprobs));
    }
  if (rows.empty()) return {};
  const int tp = tp_comm_.size();
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> max_value;
  std::vector<int32_t> max_index;
  reduce_argmax(rows, &max_value, &max_index);
  std::vector<float> sums = local_sums(sampling, rows, max_value, device_logits, tokens);
  std::vector<float> local_top_values;
  std::vector<int32_t> local_top_ids;
  local_top(sampling, rows, max_index, top_n, device_logits, &local_top_values, &local_top_ids);
  tp_comm_.all_reduce_sum(Tensor(sums.data(), DType::kF32, {2 * n}));
  const std::vector<float> above = logits_above_target(sampling, rows, sums, device_logits);
  std::vector<float> all_values(static_cast<size_t>(tp) * local_top_values.size());
  std::vector<int32_t> all_ids(static_cast<size_t>(tp) * local_top_ids.size());
  if (top_n > 0) {
    tp_comm_.all_gather(Tensor(local_top_values.data(), DType::kF32, {n * top_n}),
                        Tensor(all_values.data(), DType::kF32, {tp * n * top_n}));
    tp_comm_.all_gather(Tensor(local_top_ids.data(), DType::kI32, {n * top_n}),
                        Tensor(all_ids.data(), DType::kI32, {tp * n * top_n}));
  }
  std::vector<RowLogprobs> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double lse = max_value[i] + std::log(static_cast<double>(sums[i]));
    RowLogprobs l;
    l.row = static_cast<int32_t>(rows[i]);
    l.logprob = static_cast<float>(sums[static_cast<size_t>(n) + i] - lse);
    if (!above.empty() && ranked(sampling[rows[i]])) l.rank = static_cast<int32_t>(above[i]) + 1;
    std::vector<std::pair<float, int32_t>> candidates;
    for (int t = 0; t < tp; ++t)
      for (int j = 0; j < top_n; ++j) {
        const size_t at =
            (static_cast<size_t>(t) * static_cast<size_t>(n) + i) * static_cast<size_t>(top_n) +
            static_cast<size_t>(j);
        if (all_ids[at] >= 0 && all_ids[at] < model_.config().vocab_size)
          candidates.push_back({all_values[at], all_ids[at]});
      }
    std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    const size_t want =
        static_cast<size_t>(std::max(0, static_cast<int>(sampling[rows[i]].logprobs)));
    for (size_t j = 0; j < std::min(want, candidates.size()); ++j) {
      l.top_tokens.push_back(candidates[j].second);
      l.top_logprobs.push_back(static_cast<float>(candidates[j].first - lse));
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace tpllama
