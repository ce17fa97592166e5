// WorkQueue: one thread that runs the jobs handed to it, one at a time, in the
// order they came. A fully sharded strategy runs its collectives there
// (all-gathers of the next layer's parameters, reduce-scatters of the last
// layer's gradients) while the calling thread computes; since every task hands
// over the same collectives in the same order, the tasks' threads meet in the
// same order too.
//
// A job that throws ends the queue: the jobs after it are dropped, and wait()
// (or wait_all()) rethrows its exception on the caller's thread. The jobs set
// their own deadlines (a collective's timeout); wait() waits for the job.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dtrain {

class WorkQueue {
 public:
  // `name`: the thread's name in traces and hang reports.
  explicit WorkQueue(std::string name);
  ~WorkQueue();  // waits for the running job, drops the rest
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job`; returns its ticket (1, 2, ... in order).
  uint64_t submit(std::function<void()> job);
  // Waits until job `ticket` (and every one before it) ran; rethrows a job's error.
  void wait(uint64_t ticket);
  // Waits for every job submitted so far.
  void wait_all();

 private:
  void run();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  uint64_t submitted_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace dtrain
