// Implementation of replica_pool.h.
#include "strategy/replica_pool.h"

#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtrain::strategy {

ReplicaPool::ReplicaPool(int replicas, int threads_each) : threads_each_(threads_each) {
  for (int r = 1; r < replicas; ++r) threads_.emplace_back([this, r] { worker(r); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::run(const std::function<void(int)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    error_ = nullptr;
    running_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return running_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ReplicaPool::worker(int replica) {
  kernels::set_num_threads(threads_each_);  // this thread's OpenMP team (and flush-to-zero)
  int64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* fn = job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*fn)(replica);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--running_ == 0) cv_.notify_all();
  }
}

}  // namespace dtrain::strategy
