// The MPI session: MPI's start and end, and the few verbs over the whole world the commands need.
// With the communicators, the only door to MPI: nothing outside src/parallel calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/topology.h"

namespace tpllama {

class MpiCommunicator;

// This process's place on its node as Open MPI's launcher (mpirun) announces it in the
// environment, readable before MPI starts: nullopt when mpirun did not start it.
struct LocalPlacement {
  int local_rank = 0;
  int ranks_on_node = 1;
};
std::optional<LocalPlacement> launcher_placement();

// Throws tpllama::Error with the MPI error string when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what);

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  // Whether two threads of a rank may call MPI at once (MPI_THREAD_MULTIPLE): rank 0's dispatcher
  // of requests to several replicas runs beside its engine.
  bool threads_may_call() const { return threads_; }
  // Ends every rank of the job at once: the only safe exit after a failure on one rank.
  [[noreturn]] void abort(int code) const;

  // Collective verbs over every rank of the world:
  void barrier() const;
  // A barrier that waits without spinning (a rank measuring its device is not slowed by the
  // others).
  void quiet_barrier() const;
  // The smallest of every rank's value.
  long long min(long long mine) const;
  // Element-wise sums of every rank's values, on rank 0 (empty elsewhere).
  std::vector<double> sum_to_root(const std::vector<double>& mine) const;
  // Every rank's bytes, by rank, on rank 0 (empty elsewhere).
  std::vector<std::vector<uint8_t>> gather_to_root(const std::vector<uint8_t>& mine) const;
  // Every rank's `n` bytes at `mine` (a plain struct), by rank, into `all` on rank 0 (world_size *
  // n bytes there; unused elsewhere).
  void gather_to_root(const void* mine, size_t n, void* all) const;
  // Every rank's `n` bytes at `mine` (a plain struct), by rank, into `all` on every rank
  // (world_size * n bytes).
  void all_gather(const void* mine, size_t n, void* all) const;
  // Every rank's text (at most 63 bytes are kept), by rank, on every rank.
  std::vector<std::string> all_gather_text(const std::string& mine) const;
  // A communicator over the whole world of its own (plans and tokens: their messages meet no
  // other).
  std::unique_ptr<MpiCommunicator> duplicate_world() const;
  // The ranks that give the same color, ordered by key.
  std::unique_ptr<MpiCommunicator> split(int color, int key) const;
  // Where every rank runs: its node, its place there, every rank's host (collective).
  NodeInfo detect_nodes() const;

 private:
  int world_size_ = 1;
  int rank_ = 0;
  bool threads_ = false;
};

// An error whose message the failing rank has already printed; every rank knows of it.
class ReportedError : public Error {
 public:
  using Error::Error;
};

// A stop signal ended a phase on some rank (StoppedError): reported as ReportedError is, and the
// command exits with kExitStoppedEarly.
class ReportedStop : public ReportedError {
 public:
  using ReportedError::ReportedError;
};

// Runs fn on every rank, then agrees on the outcome: when it threw anywhere, the lowest failing
// rank prints its message (once for the job, not once per rank) and every rank throws
// ReportedError (ReportedStop when that rank's failure was a StoppedError). fn must not call
// collectives: a rank that failed early would never join them.
void collective_phase(const std::function<void()>& fn);

}  // namespace tpllama
