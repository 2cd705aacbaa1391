// Topology: the parallel layout of the job as a value. TP is the fastest-varying axis so that a
// by-slot hostfile keeps each TP group on one node. Getters are pure; make_topology() derives the
// layout from the nodes MPI reports.
#pragma once

#include <string>
#include <vector>

namespace tpllama {

struct LayerRange {
  int begin = 0;  // first layer of the stage
  int end = 0;    // one past the last
  int count() const { return end - begin; }
};

// The world is dp replicas of the model, each tp x pp ranks: replica r holds world ranks
// [r * tp * pp, (r + 1) * tp * pp), and within it TP is the fastest axis.
class Topology {
 public:
  // Validates dp * tp * pp == world_size and the stage split; throws with all the numbers.
  // pp_layers: explicit layers per stage (empty → even split, remainder to the middle stages).
  Topology(int world_size, int rank, int tp_size, int pp_size, int n_layers,
           std::vector<int> pp_layers = {}, int dp_size = 1);

  static Topology single(int n_layers) { return Topology(1, 0, 1, 1, n_layers); }

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }  // in the world
  int tp_size() const { return tp_size_; }
  int pp_size() const { return pp_size_; }
  int dp_size() const { return world_size_ / replica_size(); }
  int tp_rank() const { return tp_rank_of(rank_); }
  int pp_rank() const { return pp_rank_of(rank_); }
  // This rank's replica, and its place in it (0: the replica's leader, which runs its engine).
  int replica() const { return replica_of(rank_); }
  int replica_rank() const { return rank_ % replica_size(); }
  int replica_size() const { return tp_size_ * pp_size_; }
  bool is_replica_leader() const { return replica_rank() == 0; }
  // The place of another rank of the job (a world rank).
  int tp_rank_of(int rank) const { return rank % tp_size_; }
  int pp_rank_of(int rank) const { return rank % replica_size() / tp_size_; }
  int replica_of(int rank) const { return rank / replica_size(); }
  bool is_first_stage() const { return pp_rank() == 0; }
  bool is_last_stage() const { return pp_rank() == pp_size_ - 1; }
  LayerRange stage_layers(int pp_rank) const { return stages_[static_cast<size_t>(pp_rank)]; }
  LayerRange my_layers() const { return stage_layers(pp_rank()); }
  int n_layers() const { return stages_.back().end; }

 private:
  int world_size_;
  int rank_;
  int tp_size_;
  int pp_size_;
  std::vector<LayerRange> stages_;
};

// Where every rank runs: filled from MPI by MpiSession::detect_nodes() (parallel/mpi_session.h).
struct NodeInfo {
  int node_id = 0;
  int local_rank = 0;
  int ranks_on_node = 1;
  int n_nodes = 1;
  bool uniform = true;            // every node runs the same number of ranks
  std::vector<int> node_of_rank;  // world rank → node id
  std::vector<std::string> host_of_rank;
};

// What the command line asked for; 0 means "derive it".
struct LayoutRequest {
  int tp = 0;
  int pp = 0;
  std::vector<int> pp_layers;
  int dp = 0;  // replicas; 0: world / (tp * pp) when both are given, else 1
};

// The one factory: --dp/--tp/--pp as given, or derived. With --dp, each replica's ranks (world /
// dp) are laid out as a world of their own would be. Without it: both --tp and --pp given, the
// replicas that fill the world; neither, TP over the ranks of a node and PP over the nodes; one,
// the other from the world size.
Topology make_topology(const LayoutRequest& request, const NodeInfo& nodes, int world_size,
                       int rank, int n_layers);

// Even split of n_layers over pp stages; the remainder goes to the middle stages, since the first
// and last stages also carry the embedding and the lm_head.
std::vector<int> default_stage_sizes(int n_layers, int pp_size);

}  // namespace tpllama
