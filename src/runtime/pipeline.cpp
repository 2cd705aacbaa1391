// The step protocol between ranks. Every downstream send is asynchronous, so a chain of stages
// that each send forward and finally back to rank 0 cannot deadlock.
#include "runtime/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "ops/ops.h"
#include "runtime/sampler.h"

namespace tpllama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kTagStep = 101;    // plan, stage s → stage s+1 (world)
constexpr int kTagTokens = 102;  // sampled tokens, last stage → rank 0 (world)
constexpr int kTagHidden = 103;  // hidden states after the plan, stage s → stage s+1 (stage_comm)

constexpr const char* kInTheEngine = "in the engine: planning steps, reading requests, writing results";

}  // namespace

Pipeline::Pipeline(LlamaModel& model, KvCache& cache, const Topology& topology, Communicator& tp_comm,
                   Communicator& stage_comm, Communicator& world, TraceRecorder* trace)
    : model_(model),
      cache_(cache),
      topology_(topology),
      tp_comm_(tp_comm),
      stage_comm_(stage_comm),
      world_(world),
      trace_(trace) {
  TPLLAMA_CHECK(stage_comm.size() == topology.pp_size() && stage_comm.rank() == topology.pp_rank(), "stage group of ",
                stage_comm.size(), " ranks, rank ", stage_comm.rank(), ", for stage ", topology.pp_rank(), " of ",
                topology.pp_size());
  const DeviceContext& ctx = model.context();
  const size_t rows = static_cast<size_t>(model.limits().max_logit_rows);
  if (topology.is_last_stage()) {
    if (ctx.device != Device::kCpu) host_row_ = Buffer(static_cast<size_t>(model.vocab_local()) * sizeof(float));
    argmax_index_ = ops::allocate(ctx, rows * sizeof(int32_t));
    argmax_value_ = ops::allocate(ctx, rows * sizeof(float));
    logprob_rows_ = ops::allocate(ctx, rows * sizeof(int32_t));
    logprob_max_ = ops::allocate(ctx, rows * sizeof(float));
    logprob_chosen_ = ops::allocate(ctx, rows * sizeof(int32_t));
    logprob_sums_ = ops::allocate(ctx, 2 * rows * sizeof(float));
    const size_t tp = static_cast<size_t>(topology.tp_size()), chunk = static_cast<size_t>(model.limits().max_sample_rows);
    const size_t row_bytes = static_cast<size_t>(model.vocab_local()) * sizeof(float);
    sample_index_ = ops::allocate(ctx, tp * chunk * sizeof(int32_t));
    sample_whole_ = ops::allocate(ctx, tp * chunk * row_bytes);
    if (tp > 1) sample_gathered_ = ops::allocate(ctx, tp * chunk * row_bytes);
  }
  connect_stages();
}

// One row of hidden states from the first stage to the last: NCCL connects a pair of ranks on
// their first send and receive, each host waiting there for its peer, so no step pays for that.
void Pipeline::connect_stages() {
  if (stage_comm_.size() == 1) return;
  const Tensor row = model_.input_hidden(1);
  if (!topology_.is_first_stage()) stage_comm_.recv(row, topology_.pp_rank() - 1, kTagHidden);
  if (!topology_.is_last_stage()) stage_comm_.send_async(row, topology_.pp_rank() + 1, kTagHidden);
  ops::synchronize(model_.context());
}

std::optional<SampledRows> Pipeline::submit(const StepPlan& plan) {
  TPLLAMA_CHECK(topology_.rank() == 0, "submit on rank ", topology_.rank());
  std::vector<uint8_t> bytes = encode_plan(plan);
  doing("handing the step to the TP group");
  tp_comm_.broadcast_bytes(bytes, 0);
  std::optional<SampledRows> rows = execute(plan, bytes);
  doing(kInTheEngine);
  return rows;
}

SampledRows Pipeline::receive_tokens(int64_t expected_group) {
  const auto start = Clock::now();
  TraceSpan span(trace_, "wait for tokens", TraceTrack::kWait);
  doing("waiting for the sampled tokens from the last stage");
  SampledRows rows = decode_sampled(world_.recv_bytes(last_stage_root(), kTagTokens));
  doing(kInTheEngine);
  stats_.wait_seconds += seconds_since(start);
  TPLLAMA_CHECK(rows.group == expected_group, "tokens of group ", rows.group, " arrived, expected ", expected_group);
  return rows;
}

void Pipeline::serve() {
  TPLLAMA_CHECK(topology_.rank() != 0, "serve on rank 0");
  while (true) {
    std::vector<uint8_t> bytes;
    const auto start = Clock::now();
    {
      TraceSpan span(trace_, "wait for a step", TraceTrack::kWait);
      doing(topology_.is_first_stage() ? "waiting for the next step from rank 0"
                                       : "waiting for the next step from the previous stage");
      if (topology_.is_first_stage())
        tp_comm_.broadcast_bytes(bytes, 0);
      else
        bytes = world_.recv_bytes(prev_stage_rank(), kTagStep);
    }
    stats_.wait_seconds += seconds_since(start);
    StepPlan plan = decode_plan(bytes);
    execute(plan, bytes);
    if (plan.shutdown) break;
    if (const int signal = stop_signal(); signal != 0 && !told_of_signal_) {
      told_of_signal_ = true;
      log::warn("rank " + std::to_string(topology_.rank()) + " received signal " + std::to_string(signal) +
                ", but only rank 0 stops the run: signal rank 0, or mpirun / srun, which pass it to every rank");
    }
  }
  world_.wait_sends();
  stage_comm_.wait_sends();
  if (stall_ != nullptr) stall_->stop();  // no more steps: what follows (the report) is not one
}

void Pipeline::shutdown() {
  StepPlan plan;
  plan.shutdown = true;
  submit(plan);
  world_.wait_sends();
  stage_comm_.wait_sends();
  if (stall_ != nullptr) stall_->stop();  // no more steps: the output's last sync is not one
}

std::optional<SampledRows> Pipeline::execute(const StepPlan& plan, const std::vector<uint8_t>& bytes) {
  for (const CacheOp& op : plan.cache_ops) {
    if (op.block == CacheOp::kRelease)
      cache_.release(op.slot);
    else
      cache_.append_block(op.slot, op.block);
  }
  if (plan.shutdown) {
    if (!topology_.is_last_stage()) world_.send_bytes_async(bytes, next_stage_rank(), kTagStep);
    return std::nullopt;
  }
  const int64_t n = static_cast<int64_t>(plan.batch.positions.size());
  if (!topology_.is_first_stage() && n > 0) {
    const auto start = Clock::now();
    TraceSpan span(trace_, "wait for hidden states", TraceTrack::kWait);
    doing("waiting for hidden states from the previous stage");
    stage_comm_.recv(model_.input_hidden(n), topology_.pp_rank() - 1, kTagHidden);
    ops::synchronize(model_.context());  // NCCL receives on the stream: the wait ends here
    stats_.wait_seconds += seconds_since(start);
  }
  const auto start = Clock::now();
  Tensor out;
  {
    TraceSpan span(trace_, "forward", TraceTrack::kCompute);
    doing("in the forward pass (compute and TP collectives)");
    out = model_.forward(plan.batch, cache_);
    ops::synchronize(model_.context());  // a GPU's queued kernels belong to this span
  }
  stats_.compute_seconds += seconds_since(start);
  ++stats_.steps;
  if (stall_ != nullptr) stall_->step_done();
  if (!topology_.is_last_stage()) {
    // The plan first: the next stage learns from it how many rows of hidden states follow.
    world_.send_bytes_async(bytes, next_stage_rank(), kTagStep);
    if (n == 0) return std::nullopt;
    TPLLAMA_CHECK(out.numel() == n * model_.config().dim, "hidden states ", out.shape_string(), " for ", n, " tokens");
    if (stage_comm_.sends_hold_stream()) {
      // The next stage posts its receive only once it has the plan, and MPI moves a large message
      // only while its sender is in MPI: waiting on the stream (or in NCCL's connection to the
      // peer) with the plan still in flight would hang both ranks. The send would wait for the
      // receiver anyway.
      const auto wait_start = Clock::now();
      TraceSpan span(trace_, "wait for the next stage", TraceTrack::kWait);
      doing("waiting for the next stage to take the plan");
      world_.wait_sends();
      stats_.wait_seconds += seconds_since(wait_start);
    }
    stage_comm_.send_async(out, topology_.pp_rank() + 1, kTagHidden);
    return std::nullopt;
  }
  SampledRows rows;
  rows.group = plan.group;
  {
    const auto sample_start = Clock::now();
    TraceSpan span(trace_, "sample", TraceTrack::kCompute);
    doing("sampling (with TP collectives)");
    local_argmax(out);
    rows.tokens = sample_rows(plan, out);
    rows.logprobs = row_logprobs(plan, out, rows.tokens);
    stats_.compute_seconds += seconds_since(sample_start);
  }
  if (topology_.rank() == 0) return rows;
  if (topology_.tp_rank() == 0) world_.send_bytes_async(encode_sampled(rows), 0, kTagTokens);
  return std::nullopt;
}

void Pipeline::local_argmax(const Tensor& logits) {
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
void Pipeline::reduce_argmax(const std::vector<size_t>& rows, std::vector<float>* values,
                             std::vector<int32_t>* indices) {
  values->resize(rows.size());
  indices->resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    (*values)[i] = local_max_value_[rows[i]];
    (*indices)[i] = model_.vocab_begin() + local_max_index_[rows[i]];
  }
  tp_comm_.all_reduce_argmax(*values, *indices);
}

const float* Pipeline::host_row(const Tensor& logits, int64_t r) {
  const int64_t cols = logits.size(1);
  if (logits.device() == Device::kCpu) return logits.as<float>() + r * cols;
  const Tensor row(static_cast<float*>(logits.data()) + r * cols, DType::kF32, {cols}, logits.device());
  ops::download(model_.context(), host_row_.data(), row);
  return static_cast<const float*>(host_row_.data());
}

// Greedy rows: argmax of each TP shard, reduced across the group (no logits move). Sampled rows:
// the shards are gathered into whole rows, then every TP rank draws the same token with the
// uniform rank 0 drew (ops::sample_rows: on a GPU, sorted and drawn there).
std::vector<int32_t> Pipeline::sample_rows(const StepPlan& plan, const Tensor& device_logits) {
  const size_t rows = plan.sampling.size();
  const int v_local = model_.vocab_local();
  std::vector<int32_t> tokens(rows, 0);
  std::vector<size_t> greedy, sampled;
  for (size_t r = 0; r < rows; ++r) (plan.sampling[r].params.temperature == 0.0 ? greedy : sampled).push_back(r);

  std::vector<float> values;
  std::vector<int32_t> indices;
  reduce_argmax(greedy, &values, &indices);
  for (size_t i = 0; i < greedy.size(); ++i) tokens[greedy[i]] = indices[i];

  // Sampled rows, a chunk at a time: this shard's rows, gathered across the TP group and laid out
  // as whole rows, then drawn on the model's device; only the token ids come back.
  const DeviceContext& ctx = model_.context();
  const int tp = topology_.tp_size();
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
      // The gather puts shard t's row i at row t*s + i; whole row i is shard 0's row i, then shard 1's...
      Tensor gathered = sample_gathered_.view(DType::kF32, {tp * s, v_local});
      tp_comm_.all_gather(whole, gathered);
      index.resize(static_cast<size_t>(tp * s));
      for (int64_t i = 0; i < s; ++i)
        for (int t = 0; t < tp; ++t) index[static_cast<size_t>(i * tp + t)] = static_cast<int32_t>(t * s + i);
      rows_of = sample_index_.view(DType::kI32, {tp * s});
      ops::upload(ctx, rows_of, index.data());
      whole = sample_whole_.view(DType::kF32, {tp * s, v_local});
      ops::gather_rows(ctx, whole, gathered, rows_of);
    }
    std::vector<ops::SampleRow> draws(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) {
      const RowSampling& rs = plan.sampling[sampled[first + static_cast<size_t>(i)]];
      draws[static_cast<size_t>(i)] = {rs.params, rs.uniform};
    }
    const std::vector<int32_t> drawn =
        ops::sample_rows(ctx, whole.reshape({s, tp * int64_t{v_local}}), model_.config().vocab_size, draws);
    for (int64_t i = 0; i < s; ++i) tokens[sampled[first + static_cast<size_t>(i)]] = drawn[static_cast<size_t>(i)];
  }
  return tokens;
}

// Log-softmax across the TP shards without gathering the rows: the maximum and the sum of
// exponentials are reduced, the chosen token's logit comes from the rank that holds it, and each
// rank's top-N candidates are gathered (N per rank, not the vocabulary).
std::vector<RowLogprobs> Pipeline::row_logprobs(const StepPlan& plan, const Tensor& device_logits,
                                                const std::vector<int32_t>& tokens) {
  std::vector<size_t> rows;
  int top_n = 0;
  for (size_t r = 0; r < plan.sampling.size(); ++r)
    if (plan.sampling[r].logprobs >= 0 || plan.sampling[r].target >= 0) {
      rows.push_back(r);
      top_n = std::max(top_n, static_cast<int>(plan.sampling[r].logprobs));
    }
  if (rows.empty()) return {};
  const int v_local = model_.vocab_local(), tp = topology_.tp_size(), begin = model_.vocab_begin();
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> max_value;
  std::vector<int32_t> max_index;
  reduce_argmax(rows, &max_value, &max_index);
  // [0, n): sum of exp(logit - max); [n, 2n): the chosen token's logit (0 on ranks without it),
  // computed where the logits are; only these 2n numbers (and the rows asking for top candidates)
  // reach the host.
  const DeviceContext& ctx = model_.context();
  std::vector<int32_t> row_index(rows.size()), chosen(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    row_index[i] = static_cast<int32_t>(rows[i]);
    const int32_t target = plan.sampling[rows[i]].target;
    const int local = (target >= 0 ? target : tokens[rows[i]]) - begin;
    chosen[i] = local >= 0 && local < v_local ? local : -1;
  }
  const Tensor rows_in = logprob_rows_.view(DType::kI32, {n}), max_in = logprob_max_.view(DType::kF32, {n});
  const Tensor chosen_in = logprob_chosen_.view(DType::kI32, {n}), sums_out = logprob_sums_.view(DType::kF32, {2 * n});
  ops::upload(ctx, rows_in, row_index.data());
  ops::upload(ctx, max_in, max_value.data());
  ops::upload(ctx, chosen_in, chosen.data());
  ops::logit_sums(ctx, sums_out, device_logits, rows_in, max_in, chosen_in);
  std::vector<float> sums(static_cast<size_t>(2 * n));
  ops::download(ctx, sums.data(), sums_out);
  std::vector<float> local_top_values(static_cast<size_t>(n * top_n), -INFINITY);
  std::vector<int32_t> local_top_ids(static_cast<size_t>(n * top_n), -1);
  const int k = std::min(top_n, v_local);
  std::vector<int32_t> order(static_cast<size_t>(v_local));
  for (size_t i = 0; k > 0 && i < rows.size(); ++i) {
    if (plan.sampling[rows[i]].logprobs <= 0) continue;
    const float* row = host_row(device_logits, static_cast<int64_t>(rows[i]));
    for (int v = 0; v < v_local; ++v) order[static_cast<size_t>(v)] = v;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int j = 0; j < k; ++j) {
      local_top_values[i * static_cast<size_t>(top_n) + static_cast<size_t>(j)] = row[order[static_cast<size_t>(j)]];
      local_top_ids[i * static_cast<size_t>(top_n) + static_cast<size_t>(j)] = begin + order[static_cast<size_t>(j)];
    }
  }
  tp_comm_.all_reduce_sum(Tensor(sums.data(), DType::kF32, {2 * n}));
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
    std::vector<std::pair<float, int32_t>> candidates;
    for (int t = 0; t < tp; ++t)
      for (int j = 0; j < top_n; ++j) {
        const size_t at = (static_cast<size_t>(t) * static_cast<size_t>(n) + i) * static_cast<size_t>(top_n) + static_cast<size_t>(j);
        if (all_ids[at] >= 0 && all_ids[at] < model_.config().vocab_size) candidates.push_back({all_values[at], all_ids[at]});
      }
    std::sort(candidates.begin(), candidates.end(),
              [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    const size_t want = static_cast<size_t>(std::max(0, static_cast<int>(plan.sampling[rows[i]].logprobs)));
    for (size_t j = 0; j < std::min(want, candidates.size()); ++j) {
      l.top_tokens.push_back(candidates[j].second);
      l.top_logprobs.push_back(static_cast<float>(candidates[j].first - lse));
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace tpllama
