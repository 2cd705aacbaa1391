// The step protocol between ranks. Every downstream send is asynchronous, so a chain of stages
// that each send forward and finally back to rank 0 cannot deadlock.
#include "executor/pipeline.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "ops/device.h"

namespace tpllama {
namespace {

constexpr int kTagStep = 101;    // plan, stage s → stage s+1 (world)
constexpr int kTagTokens = 102;  // sampled tokens, last stage → rank 0 (world)
constexpr int kTagHidden = 103;  // hidden states after the plan, stage s → stage s+1 (stage_comm)

constexpr const char* kInTheEngine =
    "in the engine: planning steps, reading requests, writing results";

}  // namespace

Pipeline::Pipeline(LlamaModel& model, KvCache& cache, const Topology& topology,
                   Communicator& tp_comm, Communicator& stage_comm, Communicator& world,
                   TraceRecorder* trace)
    : model_(model),
      cache_(cache),
      topology_(topology),
      tp_comm_(tp_comm),
      stage_comm_(stage_comm),
      world_(world),
      trace_(trace) {
  TPLLAMA_CHECK(stage_comm.size() == topology.pp_size() && stage_comm.rank() == topology.pp_rank(),
                "stage group of ", stage_comm.size(), " ranks, rank ", stage_comm.rank(),
                ", for stage ", topology.pp_rank(), " of ", topology.pp_size());
  TPLLAMA_CHECK(world.size() == topology.replica_size() && world.rank() == topology.replica_rank(),
                "replica group of ", world.size(), " ranks, rank ", world.rank(), ", for rank ",
                topology.replica_rank(), " of a replica of ", topology.replica_size());
  if (topology.is_last_stage()) head_ = std::make_unique<VocabParallelHead>(model, tp_comm);
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
  TPLLAMA_CHECK(topology_.is_replica_leader(), "submit on rank ", topology_.rank());
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
  TPLLAMA_CHECK(rows.group == expected_group, "tokens of group ", rows.group, " arrived, expected ",
                expected_group);
  return rows;
}

void Pipeline::serve() {
  TPLLAMA_CHECK(!topology_.is_replica_leader(), "serve on the leader of replica ",
                topology_.replica());
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
    if (plan.kind == PlanKind::kShutdown) break;
    if (const int signal = stop_signal(); signal != 0 && !told_of_signal_) {
      told_of_signal_ = true;
      // Normal under mpirun / srun, which pass the signal to every rank: not a fault, so not a
      // warning.
      log::info("rank " + std::to_string(topology_.rank()) + " received signal " +
                std::to_string(signal) +
                "; rank 0 decides the stop and this rank follows it (a signal to this rank alone "
                "stops nothing: "
                "signal rank 0, or mpirun / srun, which pass it to every rank)");
    }
  }
  world_.wait_sends();
  stage_comm_.wait_sends();
  if (stall_ != nullptr) stall_->stop();  // no more steps: what follows (the report) is not one
}

void Pipeline::shutdown() {
  StepPlan plan;
  plan.kind = PlanKind::kShutdown;
  submit(plan);
  world_.wait_sends();
  stage_comm_.wait_sends();
  if (stall_ != nullptr) stall_->stop();  // no more steps: the output's last sync is not one
}

void Pipeline::keep_alive() {
  StepPlan plan;
  plan.kind = PlanKind::kKeepAlive;
  submit(plan);
  doing("in the engine: waiting for input (the input stream has no whole line yet)");
}

std::optional<SampledRows> Pipeline::execute(const StepPlan& plan,
                                             const std::vector<uint8_t>& bytes) {
  if (plan.kind == PlanKind::kKeepAlive) {
    if (!topology_.is_last_stage()) world_.send_bytes_async(bytes, next_stage_rank(), kTagStep);
    if (stall_ != nullptr) stall_->step_done();
    return std::nullopt;
  }
  apply_cache_ops(plan);
  if (plan.kind == PlanKind::kShutdown) {
    if (!topology_.is_last_stage()) world_.send_bytes_async(bytes, next_stage_rank(), kTagStep);
    return std::nullopt;
  }
  const int64_t n = static_cast<int64_t>(plan.batch.positions.size());
  if (!topology_.is_first_stage() && n > 0) receive_hidden(n);
  const Tensor out = forward(plan);
  if (!topology_.is_last_stage()) {
    send_hidden(bytes, out, n);
    return std::nullopt;
  }
  SampledRows rows = sample(plan, out);
  if (topology_.is_replica_leader()) return rows;
  if (topology_.tp_rank() == 0) world_.send_bytes_async(encode_sampled(rows), 0, kTagTokens);
  return std::nullopt;
}

void Pipeline::apply_cache_ops(const StepPlan& plan) {
  for (const CacheOp& op : plan.cache_ops) {
    if (op.block == CacheOp::kRelease)
      cache_.release(op.slot);
    else if (op.replaces >= 0)
      cache_.replace_block(op.slot, op.replaces, op.block);
    else
      cache_.append_block(op.slot, op.block);
  }
}

void Pipeline::receive_hidden(int64_t n) {
  const auto start = Clock::now();
  TraceSpan span(trace_, "wait for hidden states", TraceTrack::kWait);
  doing("waiting for hidden states from the previous stage");
  stage_comm_.recv(model_.input_hidden(n), topology_.pp_rank() - 1, kTagHidden);
  ops::synchronize(model_.context());  // NCCL receives on the stream: the wait ends here
  stats_.wait_seconds += seconds_since(start);
}

Tensor Pipeline::forward(const StepPlan& plan) {
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
  return out;
}

void Pipeline::send_hidden(const std::vector<uint8_t>& bytes, const Tensor& out, int64_t n) {
  // The plan first: the next stage learns from it how many rows of hidden states follow.
  world_.send_bytes_async(bytes, next_stage_rank(), kTagStep);
  if (n == 0) return;
  TPLLAMA_CHECK(out.numel() == n * model_.config().dim, "hidden states ", out.shape_string(),
                " for ", n, " tokens");
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
}

SampledRows Pipeline::sample(const StepPlan& plan, const Tensor& logits) {
  SampledRows rows;
  rows.group = plan.group;
  const auto start = Clock::now();
  TraceSpan span(trace_, "sample", TraceTrack::kCompute);
  doing("sampling (with TP collectives)");
  static_cast<SampledTokens&>(rows) = head_->sample(plan.sampling, plan.edits, plan.masks, logits);
  stats_.compute_seconds += seconds_since(start);
  return rows;
}

}  // namespace tpllama
