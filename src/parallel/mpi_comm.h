// MPI session (init/finalize, world and node queries) and MpiCommunicator for host memory.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace tpllama {

// Throws tpllama::Error with the MPI error string when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what);

// Owns MPI_Init_thread / MPI_Finalize for the process.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  // Ends every rank of the job at once: the only safe exit after a failure on one rank.
  [[noreturn]] void abort(int code) const;

 private:
  int world_size_ = 1;
  int rank_ = 0;
};

// Fills the node placement of a Topology from MPI_Comm_split_type(SHARED).
void detect_nodes(Topology* topology);

// Move-only owner of an MPI communicator (never MPI_COMM_WORLD itself).
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);  // takes ownership of comm
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // MPI_Comm_split of `parent` by color, ordered by key.
  static std::unique_ptr<MpiCommunicator> split(MPI_Comm parent, int color, int key);

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(Tensor t) override;
  void all_gather(Tensor in, Tensor out) override;
  void broadcast(Tensor t, int root) override;
  void send(Tensor t, int dest, int tag) override;
  void recv(Tensor t, int src, int tag) override;
  void barrier() override;
  MPI_Comm handle() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  int rank_ = 0;
};

}  // namespace tpllama
