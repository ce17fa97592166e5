// Implementation of gradient_reducer.h.
#include "strategy/gradient_reducer.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"

namespace dtrain::strategy {

GradientReducer::GradientReducer(const std::vector<nn::Param*>& params, comm::Communicator& comm,
                                 int64_t bytes_per_pack)
    : comm_(comm) {
  int64_t total = 0;
  for (const nn::Param* p : params) total += static_cast<int64_t>(p->grad.bytes());
  if (bytes_per_pack <= 0) bytes_per_pack = std::clamp<int64_t>(total / 4, 64 << 10, 25 << 20);
  // Reverse model order: the last layer's gradients are ready first.
  Bucket current;
  int64_t current_bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    current.params.push_back(*it);
    current_bytes += static_cast<int64_t>((*it)->grad.bytes());
    if (current_bytes >= bytes_per_pack) {
      buckets_.push_back(std::move(current));
      current = {};
      current_bytes = 0;
    }
  }
  if (!current.params.empty()) buckets_.push_back(std::move(current));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    size_t floats = 0;
    for (const nn::Param* p : buckets_[b].params) {
      bucket_of_[p] = b;
      floats += static_cast<size_t>(p->grad.numel());
    }
    buckets_[b].buffer.resize(floats);
  }
  thread_ = std::thread([this] { comm_loop(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradientReducer::ride_along(size_t count, std::function<void(float* values)> fill) {
  DT_CHECK(extras_.empty() && count > 0, "ride_along is set once");
  extras_.assign(count, 0.0f);
  fill_extras_ = std::move(fill);
  buckets_.back().buffer.resize(buckets_.back().buffer.size() + count);
}

void GradientReducer::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  DT_CHECK(pending_ == 0 && queue_.empty(), "a step began while buckets were in flight");
  for (auto& b : buckets_) b.ready = 0;
}

void GradientReducer::param_ready(const nn::Param* p) {
  auto it = bucket_of_.find(p);
  DT_CHECK(it != bucket_of_.end(), "gradient of an unknown param ", p->name);
  Bucket& bucket = buckets_[it->second];
  if (++bucket.ready < bucket.params.size()) return;
  // Pack on this thread (a memcpy, or a copy from the GPU that waits for the
  // backward ops issued so far), reduce on the communication thread.
  float* dst = bucket.buffer.data();
  for (const nn::Param* q : bucket.params) {
    q->grad.copy_to_host(dst);
    dst += q->grad.numel();
  }
  if (fill_extras_ && it->second + 1 == buckets_.size()) fill_extras_(dst);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(it->second);
    ++pending_;
  }
  cv_.notify_all();
}

double GradientReducer::finish_step() {
  const trace::Span span("gradient wait", "comm");
  Stopwatch waited;
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return pending_ == 0 || error_; });
  if (error_) std::rethrow_exception(error_);
  return waited.seconds();
}

void GradientReducer::comm_loop() {
  trace::set_thread_name("gradient all-reduce");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t b = queue_.front();
    queue_.pop_front();
    lock.unlock();
    try {
      Bucket& bucket = buckets_[b];
      const trace::Span span("all-reduce", "comm",
                             trace::enabled() ? str("bucket ", b, ", ", bucket.buffer.size() * sizeof(float), " bytes")
                                              : std::string());
      comm_.all_reduce(bucket.buffer.data(), bucket.buffer.size(), comm::ReduceOp::kMean);
      const float* src = bucket.buffer.data();
      for (nn::Param* q : bucket.params) {
        // On a GPU the copy is issued on the compute stream, before the
        // optimizer's update, which is issued after finish_step().
        q->grad.copy_from_host(src);
        src += q->grad.numel();
      }
      if (fill_extras_ && b + 1 == buckets_.size())  // the mean back to the sum
        for (size_t i = 0; i < extras_.size(); ++i) extras_[i] = src[i] * static_cast<float>(comm_.size());
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      cv_.notify_all();
      return;  // the communicator is unusable after an error
    }
    lock.lock();
    --pending_;
    cv_.notify_all();
  }
}

}  // namespace dtrain::strategy
