// Pipeline: the step protocol. Rank 0 broadcasts a plan to its TP group; each stage runs its layers
// and sends the plan, then its hidden states, to the next; the last stage's vocab-parallel head
// makes the tokens, which return to rank 0. Several groups may be in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/stop_signal.h"
#include "core/trace.h"
#include "executor/step_executor.h"
#include "executor/step_plan.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/vocab_head.h"
#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace tpllama {

// Where a rank's time went: running its layers, or waiting for a plan / hidden states / tokens.
struct PipelineStats {
  double compute_seconds = 0;
  double wait_seconds = 0;
  long long steps = 0;
};

class Pipeline final : public StepExecutor {
 public:
  // stage_comm: this TP rank's column through the stages (its rank is the stage), which carries
  // the hidden states; world, the replica's ranks (all of them with one replica), carries plans
  // and tokens. "Rank 0" below is the replica's leader.
  Pipeline(LlamaModel& model, KvCache& cache, const Topology& topology, Communicator& tp_comm,
           Communicator& stage_comm, Communicator& world, TraceRecorder* trace = nullptr);

  // Rank 0: runs the plan on stage 0 and hands it on. Returns the group's tokens (one per logit
  // row) when this rank is also the last stage; otherwise they come from receive_tokens().
  std::optional<SampledRows> submit(const StepPlan& plan) override;
  // Rank 0: the tokens of the oldest group in flight (groups return in submission order).
  SampledRows receive_tokens(int64_t expected_group) override;
  // Every rank but 0: executes plans until rank 0 shuts the pipeline down.
  void serve();
  // Rank 0: stops every other rank once no group is in flight.
  void shutdown() override;
  // Rank 0, with no group in flight: a plan with no work, which resets every rank's stall watch.
  void keep_alive() override;
  const PipelineStats& stats() const { return stats_; }
  // Each step this rank finishes resets the watch's clock, and each wait tells it what it waits on;
  // the watch stops when the pipeline shuts down.
  void set_stall_watch(StallWatch* watch) { stall_ = watch; }

 private:
  void doing(const char* what) {
    if (stall_ != nullptr) stall_->at(what);
  }
  // bytes: the plan as it came, passed on to the next stage as is.
  std::optional<SampledRows> execute(const StepPlan& plan, const std::vector<uint8_t>& bytes);
  // The pieces of a step, in order: the block table changes; the previous stage's hidden states
  // (n rows) into the model's input; the forward; the hidden states on to the next stage (after
  // the plan, bytes); the last stage's tokens.
  void apply_cache_ops(const StepPlan& plan);
  void receive_hidden(int64_t n);
  Tensor forward(const StepPlan& plan);
  void send_hidden(const std::vector<uint8_t>& bytes, const Tensor& out, int64_t n);
  SampledRows sample(const StepPlan& plan, const Tensor& logits);
  void connect_stages();
  // Ranks of the replica's communicator (world_).
  int next_stage_rank() const { return topology_.replica_rank() + topology_.tp_size(); }
  int prev_stage_rank() const { return topology_.replica_rank() - topology_.tp_size(); }
  int last_stage_root() const { return (topology_.pp_size() - 1) * topology_.tp_size(); }

  LlamaModel& model_;
  KvCache& cache_;
  const Topology& topology_;
  Communicator& tp_comm_;
  Communicator& stage_comm_;
  Communicator& world_;
  PipelineStats stats_;
  TraceRecorder* trace_;
  std::unique_ptr<VocabParallelHead> head_;  // the last stage's
  bool told_of_signal_ = false;              // a stop signal to a rank other than 0 is logged once
  StallWatch* stall_ = nullptr;
};

}  // namespace tpllama
