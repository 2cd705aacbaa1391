// Memory from the shard table; time from a roofline of one decode step per stage plus the
// all-reduces (2(n-1)/n of the payload over the link, plus its latency, twice a layer) and the
// stage-to-stage send, with pp micro-batch groups in flight.
#include "planner/planner.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/shard_table.h"
#include "model/step_batch.h"
#include "model/weights.h"
#include "ops/weight.h"
#include "parallel/topology.h"

namespace tpllama {

DeviceSpec device_spec(const std::string& name) {
  // Datasheet figures: HBM/DRAM bandwidth and dense bf16 tensor FLOP/s.
  if (name == "h100-80g") return {name, 80e9, 3.35e12, 989e12};
  if (name == "h200") return {name, 141e9, 4.8e12, 989e12};
  if (name == "a100-80g") return {name, 80e9, 2.0e12, 312e12};
  if (name == "a100-40g") return {name, 40e9, 1.555e12, 312e12};
  if (name == "l40s") return {name, 48e9, 0.864e12, 362e12};
  if (name == "cpu")
    return {name, 24e9, 20e9, 100e9};  // this project's 2-core machine, roughly; override
  fail("unknown device '", name, "' (known: h100-80g, h200, a100-80g, a100-40g, l40s, cpu)");
}

LinkSpec link_spec(const std::string& name) {
  if (name == "nvlink") return {name, 450e9, 3e-6};
  if (name == "pcie") return {name, 25e9, 10e-6};
  if (name == "shm") return {name, 10e9, 2e-6};
  if (name == "infiniband") return {name, 25e9, 5e-6};
  if (name == "ethernet") return {name, 12.5e9, 30e-6};
  fail("unknown link '", name, "' (known: nvlink, pcie, shm, infiniband, ethernet)");
}

namespace {

// Bytes a weight element takes as r.dtype holds it: int8 counts its scales (the CPU layout's own
// overhead, measured on a large matrix).
double weight_element_bytes(DType dtype) {
  if (dtype != DType::kI8) return static_cast<double>(dtype_size(dtype));
  constexpr int64_t kRows = 4096, kCols = 4096;
  return static_cast<double>(ops::weight_bytes(DeviceContext{}, kRows, kCols, DType::kI8)) /
         static_cast<double>(kRows * kCols);
}

// Bytes of an activation or KV element: int8 weights keep them in f32.
size_t activation_element_bytes(DType dtype) {
  return dtype == DType::kI8 ? sizeof(float) : dtype_size(dtype);
}

struct RankLoad {
  uint64_t elements = 0;  // weights held
  uint64_t kv_per_token = 0;
  uint64_t activations = 0;
};

RankLoad rank_load(const PlanRequest& r, const Topology& t) {
  const LlamaConfig& c = r.config;
  const size_t es = activation_element_bytes(r.dtype);
  RankLoad load;
  std::set<std::string> counted;
  for (const ShardEntry& e : build_shard_table(c, t)) {
    if (!counted.insert(e.name).second) continue;
    load.elements +=
        static_cast<uint64_t>(e.split == Split::kRow ? e.rows * e.count : e.count * e.cols);
  }
  const HeadLayout h = head_layout(c, t.tp_size(), t.tp_rank());
  const uint64_t kv_local =
      static_cast<uint64_t>(h.n_kv_heads_local) * static_cast<uint64_t>(c.head_dim);
  const uint64_t q_local =
      static_cast<uint64_t>(h.n_heads_local) * static_cast<uint64_t>(c.head_dim);
  load.kv_per_token = static_cast<uint64_t>(t.my_layers().count()) * 2 * kv_local * es;
  const uint64_t per_token = 2 * static_cast<uint64_t>(c.dim) + 2 * q_local + 2 * kv_local +
                             2 * static_cast<uint64_t>(h.ffn_local) +
                             static_cast<uint64_t>(c.head_dim);
  const uint64_t rows = static_cast<uint64_t>(max_logit_rows(r.max_seqs, r.max_batch_tokens));
  load.activations = static_cast<uint64_t>(r.max_batch_tokens) * per_token * es +
                     rows * static_cast<uint64_t>(vocab_local(c, t.tp_size())) * sizeof(float);
  return load;
}

// Time of one decode step of `batch` sequences on a stage, slowest rank of the stage.
double stage_seconds(const PlanRequest& r, const RankLoad& load, int layers, int batch, int tp,
                     const LinkSpec& link, double* allreduce) {
  const double es = static_cast<double>(activation_element_bytes(r.dtype));
  double ctx = r.input_len + r.output_len / 2.0;  // mean context over a request's decode
  if (r.config.sliding_window > 0)                // a token reads only its window's keys and values
    ctx = std::min(ctx, static_cast<double>(r.config.sliding_window));
  const double bytes = static_cast<double>(load.elements) * weight_element_bytes(r.dtype) +
                       batch * ctx * static_cast<double>(load.kv_per_token);
  const double memory = bytes / r.device.bandwidth;
  const double compute = 2.0 * static_cast<double>(load.elements) * batch / r.device.flops;
  *allreduce =
      tp > 1 ? 2.0 * layers *
                   (link.latency + 2.0 * (tp - 1) / tp * batch * r.config.dim * es / link.bandwidth)
             : 0.0;
  return std::max(memory, compute) + *allreduce;
}

// The memory side of a layout: the largest rank's weights, activations and KV per token, and how
// many tokens of KV and sequences fit beside them. False (and p.problem) when not one request's
// KV fits.
bool fit_memory(const PlanRequest& r, const std::vector<RankLoad>& loads, LayoutPlan& p) {
  const double usable = r.device.memory_bytes * (r.device.name == "cpu" ? 1.0 : 0.9);
  uint64_t capacity = UINT64_MAX;
  for (const RankLoad& l : loads) {
    const double es = weight_element_bytes(r.dtype);
    const double free =
        usable - static_cast<double>(l.elements) * es - static_cast<double>(l.activations);
    p.weight_bytes = std::max<uint64_t>(
        p.weight_bytes, static_cast<uint64_t>(static_cast<double>(l.elements) * es));
    p.activation_bytes = std::max(p.activation_bytes, l.activations);
    p.kv_bytes_per_token = std::max(p.kv_bytes_per_token, l.kv_per_token);
    capacity = std::min<uint64_t>(
        capacity, free > 0 ? static_cast<uint64_t>(free / static_cast<double>(l.kv_per_token)) : 0);
  }
  p.kv_capacity_tokens = capacity;
  p.concurrent_seqs = static_cast<int>(
      std::min<uint64_t>(static_cast<uint64_t>(r.max_seqs),
                         capacity / static_cast<uint64_t>(r.input_len + r.output_len)));
  if (capacity < static_cast<uint64_t>(r.input_len + r.output_len)) {
    p.problem = "does not fit: no room for one request's KV cache after the weights";
    return false;
  }
  return true;
}

// Decode and prefill throughput of a layout that fits, with the pipeline's bubble and the time of
// its all-reduces and stage sends per step.
void estimate_throughput(const PlanRequest& r, const Topology& probe,
                         const std::vector<RankLoad>& loads, LayoutPlan& p) {
  const int tp = p.tp, pp = p.pp;
  // The engine keeps up to pp micro-batch groups in flight, but never more groups than sequences,
  // and a group is planned again only once its tokens are back from the last stage.
  const int groups = std::max(1, std::min(pp, p.concurrent_seqs));
  const int batch = std::max(1, (p.concurrent_seqs + groups - 1) / groups);  // per group
  const LinkSpec& tp_link = p.tp_crosses_nodes ? r.inter : r.intra;
  double slowest = 0, total = 0;
  for (int s = 0; s < pp; ++s) {
    double allreduce = 0;
    const double t = stage_seconds(r, loads[static_cast<size_t>(s * tp)],
                                   probe.stage_layers(s).count(), batch, tp, tp_link, &allreduce);
    slowest = std::max(slowest, t);
    total += t;
    p.allreduce_seconds_per_step = std::max(p.allreduce_seconds_per_step, allreduce);
  }
  const bool stages_cross_nodes = pp > 1 && r.nodes > 1 && tp * pp > r.ranks_per_node;
  const LinkSpec& pp_link = stages_cross_nodes ? r.inter : r.intra;
  const double es = static_cast<double>(activation_element_bytes(r.dtype));
  p.send_seconds_per_step =
      pp > 1 ? pp_link.latency + batch * r.config.dim * es / pp_link.bandwidth : 0.0;
  // One cycle: every group makes one step. A group's round trip passes every stage and every
  // send; a stage serves the groups one after another.
  const double round_trip = total + pp * p.send_seconds_per_step;
  const double cycle = std::max(round_trip, groups * (slowest + p.send_seconds_per_step));
  p.decode_tokens_per_s = groups * batch / cycle;
  p.bubble_fraction = 1.0 - groups * (total / pp) / cycle;
  // Prefill is compute-bound: every rank does 2 FLOP per weight it holds per token, in parallel
  // when the groups fill the pipeline; with fewer groups than stages, stages wait in turn.
  uint64_t most = 0;
  for (const RankLoad& l : loads) most = std::max(most, l.elements);
  p.prefill_tokens_per_s = r.device.flops / (2.0 * static_cast<double>(most)) * groups / pp;
  // The replicas run side by side, each on its own ranks and requests.
  p.decode_tokens_per_s *= p.dp;
  p.prefill_tokens_per_s *= p.dp;
}

LayoutPlan plan_one(const PlanRequest& r, int tp, int pp, int dp) {
  LayoutPlan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  const int world = tp * pp;  // a replica's ranks: every replica holds the same
  p.tp_crosses_nodes = tp > r.ranks_per_node;
  try {
    Topology probe(world, 0, tp, pp, r.config.n_layers);
    std::vector<RankLoad> loads;
    for (int rank = 0; rank < world; ++rank) {
      const Topology t(world, rank, tp, pp, r.config.n_layers);
      if (r.dtype == DType::kI8) check_int8_slices(r.config, t);  // as run refuses it
      loads.push_back(rank_load(r, t));
    }
    if (!fit_memory(r, loads, p)) return p;
    p.fits = true;
    estimate_throughput(r, probe, loads, p);
  } catch (const Error& e) {
    p.problem = e.what();
  }
  return p;
}

}  // namespace

std::vector<LayoutPlan> plan_layouts(const PlanRequest& r) {
  const long long ranks = static_cast<long long>(r.nodes) * r.ranks_per_node;
  if (ranks < 1)
    fail("the cluster has no ranks (nodes ", r.nodes, " x ranks per node ", r.ranks_per_node, ")");
  constexpr long long kMaxRanks = 65536;
  if (ranks > kMaxRanks)
    fail("the cluster has ", ranks, " ranks (nodes ", r.nodes, " x ranks per node ",
         r.ranks_per_node, "); plan lays out at most ", kMaxRanks);
  const int world = static_cast<int>(ranks);
  std::vector<LayoutPlan> plans;
  for (int replica = 1; replica <= world; ++replica) {
    if (world % replica != 0) continue;
    const int dp = world / replica;
    for (int tp = 1; tp <= replica; ++tp) {
      if (replica % tp != 0) continue;
      const int pp = replica / tp;
      if ((r.tp != 0 && tp != r.tp) || (r.pp != 0 && pp != r.pp) || (r.dp != 0 && dp != r.dp))
        continue;
      plans.push_back(plan_one(r, tp, pp, dp));
    }
  }
  if (plans.empty()) {
    std::string asked;
    for (const auto& [flag, value] : {std::pair{"dp", r.dp}, {"tp", r.tp}, {"pp", r.pp}})
      if (value != 0)
        asked += (asked.empty() ? "" : " x ") + std::string(flag) + " " + std::to_string(value);
    asked += " does not divide them";
    fail("no layout uses the cluster's ", world, " ranks (", r.nodes, " node(s) x ",
         r.ranks_per_node, "): ", asked);
  }
  std::stable_sort(plans.begin(), plans.end(), [](const LayoutPlan& a, const LayoutPlan& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.tp_crosses_nodes != b.tp_crosses_nodes) return !a.tp_crosses_nodes;
    return a.decode_tokens_per_s > b.decode_tokens_per_s;
  });
  return plans;
}

}  // namespace tpllama
