// A pool of threads woken per run, each taking items off one counter.
#include "core/worker_pool.h"

#include <algorithm>

namespace tpllama {

WorkerPool::WorkerPool(size_t threads) {
  try {
    workers_.reserve(threads);
    for (size_t t = 0; t < threads; ++t) workers_.emplace_back([this] { serve(); });
  } catch (const std::system_error&) {  // no more threads now: those started, and the caller
  } catch (...) {
    stop();
    throw;
  }
}

WorkerPool::~WorkerPool() {
  stop();
}

void WorkerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
}

void WorkerPool::take_items() {
  for (size_t i = next_++; i < items_; i = next_++) {
    try {
      (*work_)(i);
    } catch (...) {  // the run's first failure is the caller's to rethrow; the items go on
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_) failure_ = std::current_exception();
    }
  }
}

void WorkerPool::serve() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || (run_ != seen && wanted_ > 0); });
    if (stopping_) return;
    seen = run_;
    --wanted_;
    ++working_;
    lock.unlock();
    take_items();
    lock.lock();
    if (--working_ == 0) done_.notify_all();
  }
}

void WorkerPool::run(size_t n, size_t threads, const std::function<void(size_t)>& work) {
  if (n == 0) return;
  const size_t helpers = std::min({threads > 0 ? threads - 1 : 0, n - 1, workers_.size()});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work_ = &work;
    items_ = n;
    next_ = 0;
    wanted_ = helpers;
    failure_ = nullptr;
    ++run_;
  }
  if (helpers > 0) wake_.notify_all();
  take_items();
  std::exception_ptr failure;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // Workers that have not joined yet find no item left: the run ends once no worker is inside
    // it, and none may join it from now on.
    wanted_ = 0;
    done_.wait(lock, [&] { return working_ == 0; });
    work_ = nullptr;
    failure = std::exchange(failure_, nullptr);
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace tpllama
