// WorkerPool: threads started once and kept for the run, for loops whose items are independent and
// each worth a thread's while (the token mask walks of a step's constrained sequences), where
// starting and joining threads every step would cost more than some of the walks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace tpllama {

class WorkerPool {
 public:
  // Up to `threads` workers beside the caller: fewer when the system will not start more (the
  // caller's thread always works).
  explicit WorkerPool(size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs work(i) for every i in [0, n), on at most `threads` threads (the caller's among them),
  // and returns once every item is done; then rethrows the first exception an item threw (the
  // other items run all the same). One run at a time.
  void run(size_t n, size_t threads, const std::function<void(size_t)>& work);
  size_t workers() const { return workers_.size(); }

 private:
  void serve();
  // Takes items of the current run until none is left.
  void take_items();
  // Stops and joins the workers.
  void stop();

  std::mutex mutex_;
  std::condition_variable wake_;  // a run started, or the pool stops
  std::condition_variable done_;  // a worker left the current run
  std::vector<std::thread> workers_;
  const std::function<void(size_t)>* work_ = nullptr;
  size_t items_ = 0;
  std::atomic<size_t> next_{0};
  uint64_t run_ = 0;            // runs started: a worker joins each once
  size_t wanted_ = 0;           // workers the current run may still take
  size_t working_ = 0;          // workers inside the current run
  std::exception_ptr failure_;  // the current run's first
  bool stopping_ = false;
};

}  // namespace tpllama
