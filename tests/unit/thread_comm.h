// ThreadNet and ThreadComm: a Communicator whose ranks are threads of the test's process, so the
// pipeline's protocol runs without an MPI launcher. Not a model of MPI's speed: of its rules. A
// tensor send waits for its receiver (the strictest an MPI send may be), every collective checks
// that the whole group called the same one, and every wait has a deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"

namespace tpllama::testing_util {

// The groups of one test's ranks and every message between them. A wait past the deadline, or a
// rank that fails (abort()), ends every wait of every rank with an Error, so a protocol bug fails
// the test instead of hanging it.
class ThreadNet {
 public:
  explicit ThreadNet(std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : timeout_(timeout) {}

  // A new group of `size` ranks (as MPI_Comm_split makes one); returns its id for ThreadComm. All
  // groups are added before the ranks start.
  int add_group(int size) {
    std::lock_guard<std::mutex> lock(mutex_);
    groups_.push_back(std::make_unique<Group>());
    groups_.back()->size = size;
    groups_.back()->parts.resize(static_cast<size_t>(size));
    return static_cast<int>(groups_.size()) - 1;
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = why;
    changed_.notify_all();
  }

  // Messages sent and never received, over every group (a finished protocol leaves none).
  int undelivered() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (const auto& g : groups_)
      for (const auto& [key, queue] : g->mailboxes) n += static_cast<int>(queue.size());
    return n;
  }

 private:
  friend class ThreadComm;

  struct Message {
    std::vector<uint8_t> bytes;
    bool taken = false;
  };
  using Key = std::tuple<int, int, int>;  // source, destination, tag

  struct Group {
    int size = 0;
    std::map<Key, std::deque<std::shared_ptr<Message>>> mailboxes;
    // The collective in progress: what each rank brought, how many brought theirs and how many
    // have read the others'; while `full`, the next collective waits for this one to be read.
    std::string op;
    std::vector<std::vector<uint8_t>> parts;
    int arrived = 0;
    int departed = 0;
    bool full = false;
  };

  // Waits under `lock` until ready(); throws when the net is aborted or the deadline passes.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (abort_reason_.empty() && !ready()) {
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() &&
          abort_reason_.empty()) {
        abort_reason_ = what + ": nothing came for " + std::to_string(timeout_.count()) + " ms";
        changed_.notify_all();
      }
    }
    if (!abort_reason_.empty()) fail(what, ": the run was aborted (", abort_reason_, ")");
  }

  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::string abort_reason_;
};

// One rank's view of one group of a ThreadNet. Host tensors only.
class ThreadComm final : public Communicator {
 public:
  ThreadComm(ThreadNet& net, int group, int rank) : net_(net), group_(group), rank_(rank) {
    TPLLAMA_CHECK(rank >= 0 && rank < g().size, "rank ", rank, " of a group of ", g().size);
  }
  ~ThreadComm() override = default;
  ThreadComm(const ThreadComm&) = delete;
  ThreadComm& operator=(const ThreadComm&) = delete;

  int size() const override { return net_.groups_.at(static_cast<size_t>(group_))->size; }
  int rank() const override { return rank_; }

  void all_reduce_sum(Tensor t) override {
    TPLLAMA_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kI32, "all_reduce_sum on ",
                  dtype_name(t.dtype()));
    const std::vector<std::vector<uint8_t>> parts = exchange("all_reduce_sum", bytes_of(t));
    check_same_sizes(parts, "all_reduce_sum");
    // Summed in rank order on every rank, so every rank holds the same bits.
    if (t.dtype() == DType::kF32)
      sum_into<float>(t, parts);
    else
      sum_into<int32_t>(t, parts);
    ++stats_.all_reduce_calls;
    stats_.all_reduce_bytes += static_cast<double>(t.nbytes());
  }
  void all_gather(Tensor in, Tensor out) override {
    TPLLAMA_CHECK(
        out.nbytes() == in.nbytes() * static_cast<size_t>(size()) && in.dtype() == out.dtype(),
        "all_gather ", in.shape_string(), " into ", out.shape_string());
    const std::vector<std::vector<uint8_t>> parts = exchange("all_gather", bytes_of(in));
    check_same_sizes(parts, "all_gather");
    for (size_t r = 0; r < parts.size(); ++r)
      if (!parts[r].empty())
        std::memcpy(out.as<uint8_t>() + r * in.nbytes(), parts[r].data(), in.nbytes());
  }
  void broadcast(Tensor t, int root) override {
    std::vector<uint8_t> bytes = bytes_of(t);
    broadcast_bytes(bytes, root);
    TPLLAMA_CHECK(bytes.size() == t.nbytes(), "broadcast of ", bytes.size(), " bytes into ",
                  t.shape_string());
    if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  }
  void send(Tensor t, int dest, int tag) override {
    const std::shared_ptr<ThreadNet::Message> m = post(bytes_of(t), dest, tag);
    std::unique_lock<std::mutex> lock(net_.mutex_);
    net_.wait(
        lock, [&] { return m->taken; }, where("send to", dest, tag));
  }
  void recv(Tensor t, int src, int tag) override {
    const std::vector<uint8_t> bytes = recv_bytes(src, tag);
    TPLLAMA_CHECK(bytes.size() == t.nbytes(), "a message of ", bytes.size(), " bytes from rank ",
                  src, " for ", t.shape_string(), " (", t.nbytes(), " bytes)");
    if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  }
  void send_async(Tensor t, int dest, int tag) override {
    pending_.push_back(post(bytes_of(t), dest, tag));
  }
  void barrier() override { exchange("barrier", {}); }
  void all_reduce_argmax(std::vector<float>& values, std::vector<int32_t>& indices) override {
    TPLLAMA_CHECK(values.size() == indices.size(), values.size(), " values, ", indices.size(),
                  " indices");
    std::vector<uint8_t> mine(values.size() * (sizeof(float) + sizeof(int32_t)));
    if (!values.empty()) {
      std::memcpy(mine.data(), values.data(), values.size() * sizeof(float));
      std::memcpy(mine.data() + values.size() * sizeof(float), indices.data(),
                  indices.size() * sizeof(int32_t));
    }
    const std::vector<std::vector<uint8_t>> parts = exchange("all_reduce_argmax", mine);
    check_same_sizes(parts, "all_reduce_argmax");
    for (const std::vector<uint8_t>& part : parts) {
      for (size_t i = 0; i < values.size(); ++i) {
        float v = 0;
        int32_t index = 0;
        std::memcpy(&v, part.data() + i * sizeof(float), sizeof(float));
        std::memcpy(&index, part.data() + values.size() * sizeof(float) + i * sizeof(int32_t),
                    sizeof(int32_t));
        // MPI_MAXLOC: the largest value; of equal ones, the smallest index.
        if (v > values[i] || (v == values[i] && index < indices[i])) {
          values[i] = v;
          indices[i] = index;
        }
      }
    }
  }
  bool all_true(bool mine) override {
    bool all = true;
    for (const std::vector<uint8_t>& part : exchange("all_true", {uint8_t{mine}}))
      all = all && part.at(0) != 0;
    return all;
  }
  void broadcast_bytes(std::vector<uint8_t>& bytes, int root) override {
    // Every rank names the root; only the root's bytes travel.
    std::vector<uint8_t> mine(sizeof(int32_t));
    const int32_t root32 = root;
    std::memcpy(mine.data(), &root32, sizeof root32);
    if (rank_ == root) mine.insert(mine.end(), bytes.begin(), bytes.end());
    const std::vector<std::vector<uint8_t>> parts = exchange("broadcast", std::move(mine));
    for (const std::vector<uint8_t>& part : parts) {
      int32_t theirs = 0;
      std::memcpy(&theirs, part.data(), sizeof theirs);
      TPLLAMA_CHECK(theirs == root, "broadcast from root ", root, " and from root ", theirs);
    }
    const std::vector<uint8_t>& from_root = parts.at(static_cast<size_t>(root));
    bytes.assign(from_root.begin() + sizeof(int32_t), from_root.end());
  }
  void send_bytes_async(std::vector<uint8_t> bytes, int dest, int tag) override {
    // A byte message may go to the sender itself: a rank's second handle takes it (rank 0's
    // dispatcher of several replicas and its own replica's link).
    pending_.push_back(post(std::move(bytes), dest, tag, /*to_self=*/true));
  }
  std::optional<std::vector<uint8_t>> try_recv_bytes(int src, int tag, int* from) override {
    std::lock_guard<std::mutex> lock(net_.mutex_);
    const int n = size();
    for (int k = 0; k < (src == kAnySource ? n : 1); ++k) {
      // From any rank: each in turn, starting after the last one taken from (no rank starves).
      const int source = src == kAnySource ? (next_source_ + k) % n : src;
      auto it = g().mailboxes.find({source, rank_, tag});
      if (it == g().mailboxes.end() || it->second.empty()) continue;
      const std::shared_ptr<ThreadNet::Message> m = it->second.front();
      it->second.pop_front();
      m->taken = true;
      ++stats_.p2p_calls;
      if (from != nullptr) *from = source;
      if (src == kAnySource) next_source_ = (source + 1) % n;
      net_.changed_.notify_all();
      return std::move(m->bytes);
    }
    return std::nullopt;
  }
  std::unique_ptr<Communicator> second_handle() override {
    return std::make_unique<ThreadComm>(net_, group_, rank_);
  }
  std::vector<uint8_t> recv_bytes(int src, int tag) override {
    TPLLAMA_CHECK(src >= 0 && src < size() && src != rank_, "receive from rank ", src);
    std::unique_lock<std::mutex> lock(net_.mutex_);
    auto& queue = g().mailboxes[{src, rank_, tag}];
    net_.wait(
        lock, [&] { return !queue.empty(); }, where("receive from", src, tag));
    const std::shared_ptr<ThreadNet::Message> m = queue.front();
    queue.pop_front();
    m->taken = true;
    ++stats_.p2p_calls;
    net_.changed_.notify_all();
    return std::move(m->bytes);
  }
  // Waits until every asynchronous send has been received.
  void wait_sends() override {
    std::unique_lock<std::mutex> lock(net_.mutex_);
    net_.wait(
        lock,
        [&] {
          for (const auto& m : pending_)
            if (!m->taken) return false;
          return true;
        },
        where("wait for the sends of", rank_, -1));
    pending_.clear();
  }

 private:
  ThreadNet::Group& g() const { return *net_.groups_.at(static_cast<size_t>(group_)); }

  std::string where(const char* what, int peer, int tag) const {
    return "group " + std::to_string(group_) + " rank " + std::to_string(rank_) + ": " + what +
           (peer >= 0 ? " rank " + std::to_string(peer) : "") +
           (tag >= 0 ? " (tag " + std::to_string(tag) + ")" : "");
  }

  static std::vector<uint8_t> bytes_of(const Tensor& t) {
    TPLLAMA_CHECK(t.device() == Device::kCpu, "a thread communicator moves host tensors only");
    const uint8_t* begin = t.as<uint8_t>();
    return begin == nullptr ? std::vector<uint8_t>{}
                            : std::vector<uint8_t>(begin, begin + t.nbytes());
  }

  std::shared_ptr<ThreadNet::Message> post(std::vector<uint8_t> bytes, int dest, int tag,
                                           bool to_self = false) {
    TPLLAMA_CHECK(dest >= 0 && dest < size() && (to_self || dest != rank_), "send to rank ", dest,
                  " in a group of ", size());
    auto m = std::make_shared<ThreadNet::Message>();
    m->bytes = std::move(bytes);
    std::lock_guard<std::mutex> lock(net_.mutex_);
    g().mailboxes[{rank_, dest, tag}].push_back(m);
    ++stats_.p2p_calls;
    net_.changed_.notify_all();
    return m;
  }

  // Every rank's contribution to one collective, in rank order. The whole group must call the same
  // collective; the next one starts once every rank has read this one's.
  std::vector<std::vector<uint8_t>> exchange(const std::string& op, std::vector<uint8_t> mine) {
    std::unique_lock<std::mutex> lock(net_.mutex_);
    ThreadNet::Group& group = g();
    const std::string what = where(op.c_str(), -1, -1);
    net_.wait(
        lock, [&] { return !group.full; }, what + " (the previous collective)");
    if (group.arrived == 0) group.op = op;
    if (group.op != op) {
      const std::string why = what + " while rank(s) of the group called " + group.op;
      lock.unlock();
      net_.abort(why);
      fail(why);
    }
    group.parts[static_cast<size_t>(rank_)] = std::move(mine);
    if (++group.arrived == group.size) {
      group.full = true;
      net_.changed_.notify_all();
    }
    net_.wait(
        lock, [&] { return group.full; }, what);
    std::vector<std::vector<uint8_t>> parts = group.parts;
    if (++group.departed == group.size) {
      group.arrived = group.departed = 0;
      group.full = false;
      net_.changed_.notify_all();
    }
    ++stats_.collective_calls;
    return parts;
  }

  static void check_same_sizes(const std::vector<std::vector<uint8_t>>& parts, const char* op) {
    for (const std::vector<uint8_t>& part : parts)
      TPLLAMA_CHECK(part.size() == parts.front().size(), op, " of ", part.size(), " and ",
                    parts.front().size(), " bytes");
  }

  template <class T>
  static void sum_into(Tensor t, const std::vector<std::vector<uint8_t>>& parts) {
    const size_t n = static_cast<size_t>(t.numel());
    std::vector<T> sum(n, T{0}), part(n);
    for (const std::vector<uint8_t>& bytes : parts) {
      if (n > 0) std::memcpy(part.data(), bytes.data(), n * sizeof(T));
      for (size_t i = 0; i < n; ++i) sum[i] += part[i];
    }
    if (n > 0) std::memcpy(t.data(), sum.data(), n * sizeof(T));
  }

  ThreadNet& net_;
  int group_;
  int rank_;
  std::vector<std::shared_ptr<ThreadNet::Message>> pending_;  // asynchronous sends
  int next_source_ = 0;                                       // try_recv_bytes from any rank
};

// Runs body(rank) for ranks 0..n-1, each on its own thread, and joins them. A rank that throws
// aborts the net, so the others stop waiting for it; returns each rank's error ("" for none).
inline std::vector<std::string> run_ranks(ThreadNet& net, int n,
                                          const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        net.abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

}  // namespace tpllama::testing_util
