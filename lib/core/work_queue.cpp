// Implementation of work_queue.h.
#include "core/work_queue.h"

#include "core/trace.h"

namespace dtrain {

WorkQueue::WorkQueue(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t WorkQueue::submit(std::function<void()> job) {
  uint64_t ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    jobs_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  work_cv_.notify_one();
  return ticket;
}

void WorkQueue::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_ >= ticket || error_; });
  if (error_) std::rethrow_exception(error_);
}

void WorkQueue::wait_all() {
  uint64_t last = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    last = submitted_;
  }
  wait(last);
}

void WorkQueue::run() {
  trace::set_thread_name(name_);
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      jobs_.clear();
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++done_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace dtrain
