// Topology arithmetic and validation; nothing here talks to MPI.
#include "parallel/topology.h"

#include <numeric>

#include "core/error.h"

namespace tpllama {

std::vector<int> default_stage_sizes(int n_layers, int pp_size) {
  std::vector<int> sizes(static_cast<size_t>(pp_size), n_layers / pp_size);
  int remainder = n_layers % pp_size;
  // Hand out the remainder from the middle outwards so the end stages stay lighter.
  std::vector<int> order;
  for (int s = 1; s < pp_size - 1; ++s) order.push_back(s);
  order.push_back(pp_size - 1);
  order.push_back(0);
  for (size_t i = 0; remainder > 0; i = (i + 1) % order.size(), --remainder)
    ++sizes[static_cast<size_t>(order[i])];
  return sizes;
}

Topology::Topology(int world_size, int rank, int tp_size, int pp_size, int n_layers,
                   std::vector<int> pp_layers, int dp_size)
    : world_size_(world_size), rank_(rank), tp_size_(tp_size), pp_size_(pp_size) {
  if (tp_size < 1 || pp_size < 1 || dp_size < 1)
    fail("--tp (", tp_size, "), --pp (", pp_size, ") and --dp (", dp_size,
         ") must each be at least 1");
  if (dp_size * tp_size * pp_size != world_size)
    fail(dp_size > 1 ? "dp (" + std::to_string(dp_size) + ") x " : std::string(), "tp (", tp_size,
         ") x pp (", pp_size, ") = ", dp_size * tp_size * pp_size,
         " does not match the number of ranks (", world_size, ")");
  if (rank < 0 || rank >= world_size) fail("rank ", rank, " outside world of ", world_size);
  if (n_layers < pp_size)
    fail("pp (", pp_size, ") is larger than the number of layers (", n_layers, ")");
  if (pp_layers.empty()) {
    pp_layers = default_stage_sizes(n_layers, pp_size);
  } else {
    if (static_cast<int>(pp_layers.size()) != pp_size)
      fail("--pp-layers has ", pp_layers.size(), " entries but pp is ", pp_size);
    for (int n : pp_layers)
      if (n < 1) fail("--pp-layers entries must each be at least 1, got ", n);
    int sum = std::accumulate(pp_layers.begin(), pp_layers.end(), 0);
    if (sum != n_layers)
      fail("--pp-layers sums to ", sum, " but the model has ", n_layers, " layers");
  }
  int begin = 0;
  for (int n : pp_layers) {
    stages_.push_back({begin, begin + n});
    begin += n;
  }
}

}  // namespace tpllama

namespace tpllama {

Topology make_topology(const LayoutRequest& request, const NodeInfo& nodes, int world, int rank,
                       int n_layers) {
  int tp = request.tp, pp = request.pp, dp = request.dp;
  if (dp > 0) {
    if (world % dp != 0)
      fail("--dp ", dp, " does not divide the number of ranks (", world,
           "): every replica has the same number of ranks");
    const int replica = world / dp;
    if (tp == 0 && pp == 0) {
      // A replica inside a node when it fits there, else TP over a node's ranks and PP across.
      const int per_node = nodes.uniform ? nodes.ranks_on_node : 1;
      tp = replica <= per_node || replica % per_node != 0 ? replica : per_node;
    }
    if (tp == 0 || pp == 0) {
      const int given = tp != 0 ? tp : pp;
      if (replica % given != 0)
        fail(tp != 0 ? "--tp " : "--pp ", given, " does not divide the ranks of a replica (", world,
             " ranks / --dp ", dp, " = ", replica, ")");
      (tp == 0 ? tp : pp) = replica / given;
    }
    return Topology(world, rank, tp, pp, n_layers, request.pp_layers, dp);
  }
  if (tp != 0 && pp != 0) {
    if (world % (tp * pp) != 0)
      fail("tp (", tp, ") x pp (", pp, ") = ", tp * pp, " does not divide the number of ranks (",
           world, "): the job runs world / (tp x pp) replicas of the model");
    return Topology(world, rank, tp, pp, n_layers, request.pp_layers, world / (tp * pp));
  }
  if (tp == 0 && pp == 0) {
    if (!nodes.uniform)
      fail(
          "nodes run different numbers of ranks, so --tp (ranks per node) cannot be derived; give "
          "--tp and --pp");
    tp = nodes.ranks_on_node;
    pp = nodes.n_nodes;
  } else if (tp == 0) {
    if (world % pp != 0) fail("--pp ", pp, " does not divide the number of ranks (", world, ")");
    tp = world / pp;
  } else if (pp == 0) {
    if (world % tp != 0) fail("--tp ", tp, " does not divide the number of ranks (", world, ")");
    pp = world / tp;
  }
  return Topology(world, rank, tp, pp, n_layers, request.pp_layers);
}

}  // namespace tpllama
