// The step protocol between ranks. Every downstream send is asynchronous, so a chain of stages
// that each send forward and finally back to rank 0 cannot deadlock.
#include "runtime/pipeline.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "runtime/sampler.h"

namespace tpllama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kTagStep = 101;    // plan + hidden states, stage s → stage s+1
constexpr int kTagTokens = 102;  // sampled tokens, last stage → rank 0

std::vector<uint8_t> encode_tokens(int64_t group, const std::vector<int32_t>& tokens) {
  std::vector<uint8_t> bytes(sizeof(int64_t) + tokens.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), &group, sizeof group);
  std::memcpy(bytes.data() + sizeof group, tokens.data(), tokens.size() * sizeof(int32_t));
  return bytes;
}

}  // namespace

Pipeline::Pipeline(LlamaModel& model, KvCache& cache, const Topology& topology, Communicator& tp_comm,
                   Communicator& world, TraceRecorder* trace)
    : model_(model), cache_(cache), topology_(topology), tp_comm_(tp_comm), world_(world), trace_(trace) {}

std::optional<std::vector<int32_t>> Pipeline::submit(const StepPlan& plan) {
  TPLLAMA_CHECK(topology_.rank() == 0, "submit on rank ", topology_.rank());
  std::vector<uint8_t> bytes = encode_plan(plan, Tensor());
  tp_comm_.broadcast_bytes(bytes, 0);
  return execute(plan, bytes, bytes.size());
}

std::vector<int32_t> Pipeline::receive_tokens(int64_t expected_group) {
  const auto start = Clock::now();
  TraceSpan span(trace_, "wait for tokens", TraceTrack::kWait);
  std::vector<uint8_t> bytes = world_.recv_bytes(last_stage_root(), kTagTokens);
  stats_.wait_seconds += seconds_since(start);
  TPLLAMA_CHECK(bytes.size() >= sizeof(int64_t) && (bytes.size() - sizeof(int64_t)) % sizeof(int32_t) == 0,
                "token message of ", bytes.size(), " bytes");
  int64_t group = 0;
  std::memcpy(&group, bytes.data(), sizeof group);
  TPLLAMA_CHECK(group == expected_group, "tokens of group ", group, " arrived, expected ", expected_group);
  std::vector<int32_t> tokens((bytes.size() - sizeof(int64_t)) / sizeof(int32_t));
  std::memcpy(tokens.data(), bytes.data() + sizeof(int64_t), tokens.size() * sizeof(int32_t));
  return tokens;
}

void Pipeline::serve() {
  TPLLAMA_CHECK(topology_.rank() != 0, "serve on rank 0");
  while (true) {
    std::vector<uint8_t> bytes;
    const auto start = Clock::now();
    {
      TraceSpan span(trace_, "wait for a step", TraceTrack::kWait);
      if (topology_.is_first_stage())
        tp_comm_.broadcast_bytes(bytes, 0);
      else
        bytes = world_.recv_bytes(prev_stage_rank(), kTagStep);
    }
    stats_.wait_seconds += seconds_since(start);
    size_t hidden_offset = 0;
    StepPlan plan = decode_plan(bytes, &hidden_offset);
    execute(plan, bytes, hidden_offset);
    if (plan.shutdown) break;
  }
  world_.wait_sends();
}

void Pipeline::shutdown() {
  StepPlan plan;
  plan.shutdown = true;
  submit(plan);
  world_.wait_sends();
}

std::optional<std::vector<int32_t>> Pipeline::execute(const StepPlan& plan, const std::vector<uint8_t>& bytes,
                                                      size_t hidden_offset) {
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
  if (!topology_.is_first_stage()) {
    Tensor in = model_.input_hidden(n);
    TPLLAMA_CHECK(bytes.size() - hidden_offset == in.nbytes(), "hidden states of ", bytes.size() - hidden_offset,
                  " bytes for ", in.shape_string());
    std::memcpy(in.data(), bytes.data() + hidden_offset, in.nbytes());
  }
  const auto start = Clock::now();
  Tensor out;
  {
    TraceSpan span(trace_, "forward", TraceTrack::kCompute);
    out = model_.forward(plan.batch, cache_);
  }
  stats_.compute_seconds += seconds_since(start);
  ++stats_.steps;
  if (!topology_.is_last_stage()) {
    world_.send_bytes_async(encode_plan(plan, out), next_stage_rank(), kTagStep);
    return std::nullopt;
  }
  std::vector<int32_t> tokens;
  {
    const auto sample_start = Clock::now();
    TraceSpan span(trace_, "sample", TraceTrack::kCompute);
    tokens = sample_rows(plan, out);
    stats_.compute_seconds += seconds_since(sample_start);
  }
  if (topology_.rank() == 0) return tokens;
  if (topology_.tp_rank() == 0) world_.send_bytes_async(encode_tokens(plan.group, tokens), 0, kTagTokens);
  return std::nullopt;
}

// Greedy rows: argmax of each TP shard, reduced across the group (no logits move). Sampled rows:
// the shards are gathered into whole rows, then every TP rank draws the same token with the
// uniform rank 0 drew.
std::vector<int32_t> Pipeline::sample_rows(const StepPlan& plan, const Tensor& logits) {
  const size_t rows = plan.sampling.size();
  const int v_local = model_.vocab_local();
  std::vector<int32_t> tokens(rows, 0);
  std::vector<size_t> greedy, sampled;
  for (size_t r = 0; r < rows; ++r) (plan.sampling[r].params.temperature == 0.0 ? greedy : sampled).push_back(r);

  std::vector<float> values(greedy.size());
  std::vector<int32_t> indices(greedy.size());
  for (size_t i = 0; i < greedy.size(); ++i) {
    const float* row = logits.as<float>() + static_cast<int64_t>(greedy[i]) * v_local;
    const int local = argmax(row, v_local);
    values[i] = row[local];
    indices[i] = model_.vocab_begin() + local;
  }
  tp_comm_.all_reduce_argmax(values, indices);
  for (size_t i = 0; i < greedy.size(); ++i) tokens[greedy[i]] = indices[i];

  if (!sampled.empty()) {
    const int tp = topology_.tp_size();
    const int64_t s = static_cast<int64_t>(sampled.size());
    Buffer local(static_cast<size_t>(s * v_local) * sizeof(float));
    Buffer gathered(static_cast<size_t>(tp * s * v_local) * sizeof(float));
    for (int64_t i = 0; i < s; ++i)
      std::memcpy(static_cast<float*>(local.data()) + i * v_local,
                  logits.as<float>() + static_cast<int64_t>(sampled[static_cast<size_t>(i)]) * v_local,
                  static_cast<size_t>(v_local) * sizeof(float));
    tp_comm_.all_gather(local.view(DType::kF32, {s, v_local}), gathered.view(DType::kF32, {tp * s, v_local}));
    std::vector<float> row(static_cast<size_t>(tp) * static_cast<size_t>(v_local));
    for (int64_t i = 0; i < s; ++i) {
      for (int t = 0; t < tp; ++t)
        std::memcpy(row.data() + static_cast<size_t>(t) * static_cast<size_t>(v_local),
                    static_cast<const float*>(gathered.data()) + (t * s + i) * v_local,
                    static_cast<size_t>(v_local) * sizeof(float));
      const RowSampling& rs = plan.sampling[sampled[static_cast<size_t>(i)]];
      tokens[sampled[static_cast<size_t>(i)]] =
          sample_with_uniform(row.data(), model_.config().vocab_size, rs.params, rs.uniform);
    }
  }
  return tokens;
}

}  // namespace tpllama
