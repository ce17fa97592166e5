// GradientReducer: averages gradients across a group of replicas in buckets, each
// bucket's all-reduce starting as soon as backward has produced all of its
// gradients, on a communication thread, while backward goes on (PyTorch DDP's
// scheme; bucket size is strategy.bytes_per_pack).
//
// Buckets are filled in reverse model order, the order backward produces
// gradients. A bucket's gradients are copied into one flat buffer, all-reduced
// (mean), and copied back. finish_step() waits for the last bucket and returns
// how long the caller had to wait: the share of step time spent waiting on
// communication.
//
// A few small values per step (the loss sums and the stop flag) can ride along
// in the last bucket's all-reduce instead of costing a collective of their own
// (ride_along).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "nn/layer.h"

namespace dtrain::strategy {

class GradientReducer {
 public:
  // params: the trainable params in model order. bytes_per_pack 0 = auto (a
  // quarter of all gradients, between 64 KiB and 25 MiB).
  GradientReducer(const std::vector<nn::Param*>& params, comm::Communicator& comm, int64_t bytes_per_pack);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  size_t bucket_count() const { return buckets_.size(); }

  // `count` floats travel with the last bucket (the one backward finishes last):
  // `fill` writes them when that bucket is packed, on the thread running
  // backward; after finish_step(), extras() holds their sums over the group.
  void ride_along(size_t count, std::function<void(float* values)> fill);
  const std::vector<float>& extras() const { return extras_; }

  void begin_step();
  // p's gradient is final for this step (called from the thread running backward).
  void param_ready(const nn::Param* p);
  // Waits until every bucket is reduced and copied back; rethrows a communication
  // error (PeerLost, TimeoutError). Returns the seconds spent waiting.
  double finish_step();

 private:
  struct Bucket {
    std::vector<nn::Param*> params;
    std::vector<float> buffer;
    size_t ready = 0;
  };
  void comm_loop();

  comm::Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const nn::Param*, size_t> bucket_of_;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;  // buckets ready to reduce
  size_t pending_ = 0;        // buckets launched and not yet reduced
  bool stop_ = false;
  std::exception_ptr error_;
  std::function<void(float*)> fill_extras_;
  std::vector<float> extras_;  // summed over the group after finish_step()
};

}  // namespace dtrain::strategy
