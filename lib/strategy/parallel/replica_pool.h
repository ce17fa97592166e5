// ReplicaPool: one long-lived thread per local replica beyond the first (the
// caller runs replica 0), so each replica keeps its own OpenMP team, oneDNN
// primitive cache and flush-to-zero setting across steps.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain::strategy {

class ReplicaPool {
 public:
  // `replicas` in all; each replica's thread computes with `threads_each` threads.
  ReplicaPool(int replicas, int threads_each);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // Runs fn(r) for every replica r at once (r = 0 on the calling thread) and
  // returns when all are done, rethrowing the first exception.
  void run(const std::function<void(int replica)>& fn);

 private:
  void worker(int replica);

  int threads_each_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  int64_t generation_ = 0;  // bumped for every run()
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace dtrain::strategy
