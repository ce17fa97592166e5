// Implementation of replica_pool.h.
#include "strategy/parallel/replica_pool.h"

#include "core/error.h"
#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtrain::strategy {
namespace {

// Whether e is a TimeoutError. A replica that fails makes the others wait in
// their local collective until its deadline: the failure, not the deadline, is
// the error to report.
bool timed_out(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const TimeoutError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace


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
  if (mine && error_ && timed_out(mine) && !timed_out(error_)) std::rethrow_exception(error_);
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
    if (error && (!error_ || (timed_out(error_) && !timed_out(error)))) error_ = error;
    if (--running_ == 0) cv_.notify_all();
  }
}

}  // namespace dtrain::strategy
