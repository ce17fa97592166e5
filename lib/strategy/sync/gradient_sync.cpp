// Implementation of gradient_sync.h.
#include "strategy/sync/gradient_sync.h"

#include "core/check.h"

namespace dtrain::strategy {

void GradientSync::ride_along(size_t /*count*/, std::function<void(float*)> /*fill*/) {
  DT_CHECK(false, "values ride along only with a sync that carries sums");
}

BucketedSync::BucketedSync(std::vector<nn::Param*> trainable, comm::Communicator& group, int64_t bytes_per_pack,
                           AllreduceDType dtype)
    : trainable_(std::move(trainable)), dtype_(dtype), reducer_(trainable_, group, bytes_per_pack, dtype) {}

void BucketedSync::ride_along(size_t count, std::function<void(float*)> fill) {
  DT_CHECK(!registered_ && !fill_ && count > 0, "ride_along is set once, before the first step");
  count_ = count;
  fill_ = std::move(fill);
}

void BucketedSync::track_non_finite() {
  DT_CHECK(!registered_, "track_non_finite before the first step");
  track_ = true;
  reducer_.track_non_finite();
}

void BucketedSync::begin_backward() {
  if (!registered_) {
    // The caller's values, then (host path, loss scaling) this replica's count of
    // non-finite gradient values: one ride-along, so every replica learns the
    // job-wide count in the last bucket's all-reduce. (The device path checks the
    // reduced gradients on the GPU instead: GradientReducer::on_device.)
    const bool count = track_ && !reducer_.on_device();
    if (count_ + (count ? 1 : 0) > 0)
      reducer_.ride_along(count_ + (count ? 1 : 0), [this, count](float* out) {
        if (fill_) fill_(out);
        if (count) out[count_] = static_cast<float>(reducer_.non_finite());
      });
    registered_ = true;
  }
  reducer_.begin_step();
}

bool BucketedSync::all_finite() {
  DT_CHECK(track_, "all_finite without track_non_finite");
  // The device path's answer is job-wide already; the host path's is the sum of
  // every replica's count, which rode along.
  if (reducer_.on_device()) return reducer_.non_finite() == 0;
  return reducer_.extras()[count_] <= 0.0f;
}

std::unique_ptr<GradientSync> make_gradient_sync(Gradients path, std::vector<nn::Param*> trainable,
                                                 comm::Communicator* group, int64_t bytes_per_pack,
                                                 AllreduceDType dtype) {
  switch (path) {
    case Gradients::kCentralCopy: return std::make_unique<NoSync>(std::move(trainable), /*updates_replica=*/false);
    case Gradients::kLocalSharedMemory:
    case Gradients::kLocalNccl:
    case Gradients::kTasks:
    case Gradients::kReplicasThenTasks:
    case Gradients::kNccl:
    case Gradients::kStageCopies:
      if (group && group->size() > 1)  // (a group of one has nothing to reduce: no reducer, no thread)
        return std::make_unique<BucketedSync>(std::move(trainable), *group, bytes_per_pack, dtype);
      return std::make_unique<NoSync>(std::move(trainable));
    case Gradients::kNone:
    case Gradients::kStageAlone: return std::make_unique<NoSync>(std::move(trainable));
    case Gradients::kShardedOptimizer:
    case Gradients::kShardedGradients:
    case Gradients::kShardedParameters:
    case Gradients::kParameterServers: break;
  }
  DT_CHECK(false, "make_gradient_sync: ", gradients_name(path), " is built by its own class");
  return nullptr;
}

}  // namespace dtrain::strategy
