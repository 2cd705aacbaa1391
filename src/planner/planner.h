// The layout planner: for a model and a cluster, which TP x PP layouts fit in memory and how fast
// each should be, from the shard table (exact bytes per rank) and a roofline model of one decode
// step. No MPI, no weights: `tpllama plan` answers before anything is launched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace tpllama {

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;  // per device (per rank)
  double bandwidth = 0;     // memory read bytes/s
  double flops = 0;         // dense FLOP/s in the compute dtype
};

struct LinkSpec {
  std::string name;
  double bandwidth = 0;  // bytes/s per direction
  double latency = 0;    // seconds per message
};

// h100-80g, h200, a100-80g, a100-40g, l40s, cpu; throws naming the known ones.
DeviceSpec device_spec(const std::string& name);
// nvlink, pcie, shm (same node), infiniband, ethernet.
LinkSpec link_spec(const std::string& name);

struct PlanRequest {
  LlamaConfig config;
  int nodes = 1;
  int ranks_per_node = 1;
  DeviceSpec device;
  LinkSpec intra;  // between ranks of a node
  LinkSpec inter;  // between nodes
  DType dtype =
      DType::kBF16;  // weights, activations and KV cache (int8: weights only; the rest f32)
  int input_len = 512;
  int output_len = 256;
  int max_seqs = 256;
  int max_batch_tokens = 2048;
  int tp = 0;  // 0: every valid value
  int pp = 0;
  int dp = 0;
};

// One layout: dp replicas of tp x pp ranks. Memory and sequences are a replica's (each has its
// own KV cache and --max-seqs); throughput is the job's, every replica's summed.
struct LayoutPlan {
  int tp = 0;
  int pp = 0;
  int dp = 1;
  bool fits = false;
  std::string problem;            // why it does not fit or is invalid
  uint64_t weight_bytes = 0;      // the fullest rank
  uint64_t activation_bytes = 0;  // activation and logits buffers for max_batch_tokens
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_capacity_tokens = 0;  // the fullest rank's free memory / its bytes per token
  int concurrent_seqs = 0;          // at input_len + output_len, capped by max_seqs
  double decode_tokens_per_s = 0;
  double prefill_tokens_per_s = 0;
  double allreduce_seconds_per_step = 0;
  double send_seconds_per_step = 0;
  double bubble_fraction = 0;
  bool tp_crosses_nodes = false;
};

// Every layout with dp * tp * pp = nodes * ranks_per_node (or those requested), the ones that fit
// first, then those whose TP groups stay inside a node, fastest first: a model that fits a rank is
// replicated rather than cut into pipeline stages that wait on each other.
std::vector<LayoutPlan> plan_layouts(const PlanRequest& request);

}  // namespace tpllama
