// MPI_Init / MPI_Finalize and the world verbs. Errors return (MPI_ERRORS_RETURN) and become
// exceptions, which main turns into one message and MPI_Abort.
#include "parallel/mpi_session.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/log.h"
#include "core/stop_signal.h"
#include "parallel/mpi_comm.h"

namespace tpllama {

std::optional<LocalPlacement> launcher_placement() {
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local_rank == nullptr || local_size == nullptr) return std::nullopt;
  return LocalPlacement{std::atoi(local_rank), std::max(1, std::atoi(local_size))};
}

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  threads_ = provided >= MPI_THREAD_MULTIPLE;
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void MpiSession::barrier() const {
  mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void MpiSession::quiet_barrier() const {
  MPI_Request barrier;
  mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &barrier), "MPI_Ibarrier");
  for (int done = 0; !done;) {
    mpi_check(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) usleep(1000);
  }
}

long long MpiSession::min(long long mine) const {
  long long least = mine;
  mpi_check(MPI_Allreduce(&mine, &least, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD),
            "MPI_Allreduce");
  return least;
}

std::vector<double> MpiSession::sum_to_root(const std::vector<double>& mine) const {
  std::vector<double> sums(rank_ == 0 ? mine.size() : 0);
  TPLLAMA_CHECK(mine.size() <= INT32_MAX, "sum of ", mine.size(), " values");
  mpi_check(MPI_Reduce(mine.data(), sums.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM,
                       0, MPI_COMM_WORLD),
            "MPI_Reduce");
  return sums;
}

std::vector<std::vector<uint8_t>> MpiSession::gather_to_root(
    const std::vector<uint8_t>& mine) const {
  TPLLAMA_CHECK(mine.size() <= INT32_MAX, "gather of ", mine.size(), " bytes");
  int size = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(world_size_));
  mpi_check(MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD),
            "MPI_Gather");
  std::vector<int> offsets(sizes.size(), 0);
  long long total = sizes.empty() ? 0 : sizes[0];
  for (size_t r = 1; r < sizes.size(); ++r) {
    offsets[r] = offsets[r - 1] + sizes[r - 1];
    total += sizes[r];
  }
  TPLLAMA_CHECK(total <= INT32_MAX, "gather of ", total, " bytes");
  std::vector<uint8_t> all(rank_ == 0 ? static_cast<size_t>(total) : 0);
  mpi_check(MPI_Gatherv(mine.data(), size, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                        MPI_BYTE, 0, MPI_COMM_WORLD),
            "MPI_Gatherv");
  std::vector<std::vector<uint8_t>> by_rank;
  if (rank_ != 0) return by_rank;
  for (size_t r = 0; r < sizes.size(); ++r) {
    const auto begin = all.begin() + offsets[r];
    by_rank.emplace_back(begin, begin + sizes[r]);
  }
  return by_rank;
}

void MpiSession::gather_to_root(const void* mine, size_t n, void* all) const {
  TPLLAMA_CHECK(n <= INT32_MAX, "gather of ", n, " bytes");
  const int count = static_cast<int>(n);
  mpi_check(MPI_Gather(mine, count, MPI_BYTE, all, count, MPI_BYTE, 0, MPI_COMM_WORLD),
            "MPI_Gather");
}

void MpiSession::all_gather(const void* mine, size_t n, void* all) const {
  TPLLAMA_CHECK(n <= INT32_MAX, "all-gather of ", n, " bytes");
  const int count = static_cast<int>(n);
  mpi_check(MPI_Allgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, MPI_COMM_WORLD),
            "MPI_Allgather");
}

std::vector<std::string> MpiSession::all_gather_text(const std::string& mine) const {
  constexpr size_t kWidth = 64;
  std::vector<char> padded(kWidth, '\0'), all(kWidth * static_cast<size_t>(world_size_));
  std::copy_n(mine.begin(), std::min(mine.size(), kWidth - 1), padded.begin());
  mpi_check(
      MPI_Allgather(padded.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, MPI_COMM_WORLD),
      "MPI_Allgather");
  std::vector<std::string> texts;
  for (int r = 0; r < world_size_; ++r)
    texts.emplace_back(all.data() + static_cast<size_t>(r) * kWidth);
  return texts;
}

std::unique_ptr<MpiCommunicator> MpiSession::duplicate_world() const {
  MPI_Comm dup;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
  return std::make_unique<MpiCommunicator>(dup);
}

std::unique_ptr<MpiCommunicator> MpiSession::split(int color, int key) const {
  return MpiCommunicator::split(MPI_COMM_WORLD, color, key);
}

void collective_phase(const std::function<void()>& fn) {
  std::string message;
  bool stopped = false;
  try {
    fn();
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "unknown error";
    stopped = dynamic_cast<const StoppedError*>(&e) != nullptr;
  }
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // The lowest failing rank, and whether its failure was a stop: 2 × rank + stopped.
  const int mine = message.empty() ? 2 * world : 2 * rank + (stopped ? 1 : 0);
  int first = 2 * world;
  mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (first == 2 * world) return;
  const bool a_stop = first % 2 == 1;
  if (rank == first / 2) a_stop ? log::warn(message) : log::error(message);
  if (a_stop) throw ReportedStop(message);
  throw ReportedError(message);
}

NodeInfo MpiSession::detect_nodes() const {
  NodeInfo info;
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node_comm;
  mpi_check(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm),
      "MPI_Comm_split_type");
  MPI_Comm_rank(node_comm, &info.local_rank);
  MPI_Comm_size(node_comm, &info.ranks_on_node);
  // Node ids in order of each node's lowest world rank: count the node leaders before ours.
  const int leader = info.local_rank == 0 ? 1 : 0;
  int leaders_before = 0;
  mpi_check(MPI_Exscan(&leader, &leaders_before, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Exscan");
  if (rank == 0) leaders_before = 0;  // MPI_Exscan leaves rank 0's result undefined
  info.node_id = leaders_before;
  mpi_check(MPI_Bcast(&info.node_id, 1, MPI_INT, 0, node_comm), "MPI_Bcast");
  MPI_Comm_free(&node_comm);
  int sizes[2] = {info.ranks_on_node, -info.ranks_on_node};
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
            "MPI_Allreduce");
  info.uniform = sizes[0] == -sizes[1];
  info.node_of_rank.resize(static_cast<size_t>(world));
  mpi_check(MPI_Allgather(&info.node_id, 1, MPI_INT, info.node_of_rank.data(), 1, MPI_INT,
                          MPI_COMM_WORLD),
            "MPI_Allgather");
  info.n_nodes = *std::max_element(info.node_of_rank.begin(), info.node_of_rank.end()) + 1;
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> names(static_cast<size_t>(world) * MPI_MAX_PROCESSOR_NAME);
  mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD),
            "MPI_Allgather");
  for (int r = 0; r < world; ++r)
    info.host_of_rank.emplace_back(names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return info;
}

}  // namespace tpllama
