// GradientSync: what happens to one replica's gradients between its backward
// pass and its optimizer update, behind one interface that data parallelism and
// pipelines drive the same way, whatever the plan chose (gradient_path.h):
//
//   NoSync        one replica, or a pipeline stage alone: nothing to combine
//   CentralSync   central_storage: the replica's gradients are read by the central
//                 copy (CentralCopy::apply), which updates; the replica does not
//   BucketedSync  the bucketed all-reduce (GradientReducer) over the group the plan
//                 named: the local replicas, the training tasks, the NCCL group,
//                 the copies of a tensor part, a pipeline stage's copies
//   ZeroShard     ZeRO-1 (zero_shard.h): reduce-scatter, update a slice, all-gather
//   FullShard     ZeRO-2/3 (fully_sharded.h): per-layer reduce-scatter in hooks
//
// A step drives it as: begin_backward(), param_ready(p) for each trainable param
// as the last micro-batch's backward finishes its layer, finish_backward(); then
// the update (update_step.h) on pieces(); then after_update(applied). Values of
// the caller (loss sums, the stop flag) can ride along with the gradients'
// collective (ride_along) where the sync has one; under loss scaling the sync
// answers whether every replica's gradients were finite (all_finite()).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "nn/layer.h"
#include "strategy/sync/gradient_path.h"
#include "strategy/sync/gradient_reducer.h"

namespace dtrain::strategy {

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // Whether the sync sums a step's micro-batches itself (ZeRO-2/3's hooks add
  // each backward's gradients into the shard): the caller then keeps no sums.
  virtual bool sums_micro_batches() const { return false; }
  // The step's last backward begins; p's gradient is final (from the thread
  // running backward, in the order backward finishes them).
  virtual void begin_backward() {}
  virtual void param_ready(nn::Param* /*p*/) {}
  // After the last backward: the gradients pieces() holds are the group's mean.
  // Returns the seconds the caller waited for collectives.
  virtual double finish_backward() { return 0.0; }

  // The params the update applies to: the replica's trainable params, or this
  // task's slices of them (ZeRO); empty where the replica does not update.
  virtual const std::vector<nn::Param*>& pieces() const = 0;
  // Whether this replica's optimizer updates its pieces (false: central_storage).
  virtual bool updates_replica() const { return true; }
  // clipnorm / global_clipnorm where the norms span other tasks' slices (ZeRO);
  // nothing elsewhere. Collective.
  virtual void clip_norms() {}
  // After the update (or a skipped one): the new values where every task needs
  // them (ZeRO's all-gathers). Returns the seconds spent.
  virtual double after_update(bool /*applied*/) { return 0.0; }

  // Whether `count` caller values can ride along with the gradients' collective,
  // summed exactly (float32 on the wire).
  virtual bool carries_sums() const { return false; }
  // `fill` writes `count` values after backward (on the thread running it);
  // after finish_backward(), extras() holds their sums over the group. Set once,
  // before the first step, only where carries_sums().
  virtual void ride_along(size_t count, std::function<void(float* values)> fill);
  virtual std::span<const float> extras() const { return {}; }
  // Loss scaling: from now on, all_finite() says after finish_backward()
  // whether every replica's gradients of the step were finite.
  virtual void track_non_finite() {}
  virtual bool all_finite() = 0;
};

// No combining: the replica's own gradients are the step's (one replica; a
// pipeline stage alone; tensor_parallel's only copy), or central_storage's
// replica (updates_replica() false: CentralCopy combines and updates).
class NoSync : public GradientSync {
 public:
  explicit NoSync(std::vector<nn::Param*> trainable, bool updates_replica = true)
      : trainable_(std::move(trainable)), updates_(updates_replica) {}
  const std::vector<nn::Param*>& pieces() const override { return trainable_; }
  bool updates_replica() const override { return updates_; }
  bool all_finite() override { return count_non_finite_gradients(trainable_) == 0; }

 private:
  std::vector<nn::Param*> trainable_;
  bool updates_;
};

// The bucketed all-reduce of the replica's trainable gradients over `group`
// (mean), overlapping backward (gradient_reducer.h).
class BucketedSync : public GradientSync {
 public:
  BucketedSync(std::vector<nn::Param*> trainable, comm::Communicator& group, int64_t bytes_per_pack,
               AllreduceDType dtype);
  void begin_backward() override;
  void param_ready(nn::Param* p) override { reducer_.param_ready(p); }
  double finish_backward() override { return reducer_.finish_step(); }
  const std::vector<nn::Param*>& pieces() const override { return trainable_; }
  bool carries_sums() const override { return dtype_ == AllreduceDType::kFloat32; }
  void ride_along(size_t count, std::function<void(float* values)> fill) override;
  std::span<const float> extras() const override { return {reducer_.extras().data(), count_}; }
  void track_non_finite() override;
  bool all_finite() override;
  const GradientReducer& reducer() const { return reducer_; }

 private:
  std::vector<nn::Param*> trainable_;
  AllreduceDType dtype_;
  GradientReducer reducer_;
  size_t count_ = 0;  // the caller's values riding along
  std::function<void(float*)> fill_;
  bool track_ = false;
  bool registered_ = false;  // the ride-along handed to the reducer (at the first step)
};

// The sync of `path` for one replica of data parallelism or a pipeline stage,
// over `group` where the path reduces (nullptr or a group of one: nothing to
// reduce). ZeRO's paths are built by their own classes (the strategy holds their
// checkpoint pieces), not here.
std::unique_ptr<GradientSync> make_gradient_sync(Gradients path, std::vector<nn::Param*> trainable,
                                                 comm::Communicator* group, int64_t bytes_per_pack,
                                                 AllreduceDType dtype);

}  // namespace dtrain::strategy
