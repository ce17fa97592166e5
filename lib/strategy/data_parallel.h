// DataParallelStrategy: synchronous data parallelism, the one code path behind
// one_device (1 replica), mirrored (N replicas on threads of this process,
// gradients averaged in shared memory; on GPUs one replica per GPU, averaged by
// a local NCCL group where the build has NCCL) and multi_worker_mirrored (one replica per
// task, gradients averaged over Gloo). The chief's initial parameters are
// broadcast; every replica applies the same averaged update, so all stay identical.
//
// multi_worker_mirrored with strategy.shard_optimizer_state (ZeRO stage 1, one
// replica per task): no bucketed all-reduce; after backward the gradients are
// reduce-scattered, each task updates its 1/N slice of the parameters with its
// 1/N of the optimizer slots, and the values are all-gathered (ZeroShard). Its
// checkpoints are sharded (state_pieces()).
//
// multi_worker_mirrored with strategy.shard "gradients" or "parameters" (ZeRO
// stages 2 and 3, one replica per task): no bucketed all-reduce; FullShard's
// hooks on the model reduce-scatter each layer's gradients as backward produces
// them (and, stage 3, gather each layer's parameters just before it runs), each
// task updates its 1/N chunks, and stage 2 all-gathers the values after.
//
// multi_worker_mirrored with strategy.tensor_parallel T (one replica per task):
// each T consecutive tasks hold one copy of the model between them
// (TensorParallel splits its layers; their collectives run inside the layers
// over the copy's group); the N / T copies are data parallel: each reads its
// shard, and the tasks holding the same part in every copy all-reduce its
// gradients (the bucketed reducer over that group). The stats are summed over
// the copies, the stop flag over every task.
//
// central_storage is the same replicas with another way to combine them: one
// central copy of the variables (CentralCopy) that every replica reads before a
// step, its gradients averaged into it and one optimizer update there.
//
// A step with gradient accumulation K runs K micro-batches: the first K-1 only
// accumulate gradients locally; the last one's backward starts the bucketed
// all-reduce (one per update, overlapping with backward), then the optimizer runs.
//
// Dynamic loss scaling (train.precision mixed_float16, optim/loss_scale.h): the
// loss gradient is multiplied by the scale; each replica counts the inf/NaN
// values of its (accumulated) gradient as the buckets are packed, and the count
// rides along with the last bucket's all-reduce, so every replica learns the
// job-wide count in the same collective. Any non-finite value anywhere: every
// replica skips the optimizer (the step number the optimizer sees does not
// advance either) and the scale halves; else the gradients are divided by the
// scale and applied. central_storage does not scale (make_strategy refuses it).
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "optim/loss_scale.h"
#include "strategy/sync/central_copy.h"
#include "strategy/sync/gradient_sync.h"
#include "strategy/parallel/grid_groups.h"
#include "strategy/parallel/replica_pool.h"
#include "strategy/strategy.h"
#include "strategy/sync/update_step.h"

namespace dtrain::strategy {

class ZeroShard;
class FullShard;
class TensorParallel;
class VocabularyParallelLoss;

class DataParallelStrategy : public Strategy {
 public:
  // The gradient sync is the plan's (context.gradient_path; without one, the
  // same rule on the context): central_storage's central copy, ZeRO-1/2/3, the
  // bucketed all-reduce over the group it names, or none.
  DataParallelStrategy(const StrategyJob& job, const StrategyContext& context);
  ~DataParallelStrategy() override;

  std::string name() const override { return name_; }
  int num_replicas_in_sync() const override;
  int local_replicas() const override { return static_cast<int>(replicas_.size()); }
  void train_step(const std::vector<data::Batch>& micro_batches, int64_t step, nn::LossStats& stats,
                  const std::vector<data::Batch>* upcoming) override;
  // Staging is a copy on a GPU and a no-op on the CPU; reading ahead on both
  // keeps one code path (the CPU tests exercise the GPU's step order).
  bool wants_upcoming() const override { return true; }
  Device device() const override { return device_; }
  void eval_step(const data::Batch& batch, nn::LossStats& stats) override;
  void sync_state() override;
  void request_stop() override { stop_requested_ = true; }
  bool stop_agreed() const override { return stop_agreed_; }
  void load_state(const TensorLookup& model, const TensorLookup& optimizer) override;
  nn::Sequential& model() override { return central_ ? central_->model() : *replicas_[0].model; }
  optim::Optimizer& optimizer() override { return central_ ? central_->optimizer() : *replicas_[0].optimizer; }
  StepTimings timings() const override { return timings_; }
  optim::DynamicLossScale* loss_scale() override { return loss_scale_.get(); }
  // (tensor_parallel: a copy's tasks read the same batches, the copy's shard)
  DataShard data_shard() const override {
    if (tp_) return {workers_->rank() / tensor_group_->size(), workers_->size() / tensor_group_->size()};
    return workers_ ? DataShard{workers_->rank(), workers_->size()} : DataShard{};
  }
  // ZeRO-1: the model whole from the chief, each task's slices of the optimizer
  // slots. tensor_parallel: each task's parts of the split layers (whole tensors).
  // ZeRO-2/3: each task's chunks of every trainable tensor and its slots.
  bool sharded_state() const override { return zero_ != nullptr || tp_ != nullptr || full_ != nullptr; }
  std::vector<StatePiece> state_pieces() override;
  // tensor_parallel: the whole model's shapes (the output layer's may be split).
  ModelShapes model_shapes() override;
  // tensor_parallel, ZeRO-2/3: the whole model's (collective).
  std::string params_sha256() override;
  // ZeRO-3: every layer gathered for `use`, freed after (collective).
  void with_whole_model(const std::function<void(nn::Sequential& model)>& use) override;
  int optimizer_state_shards() const override { return zero_ || full_ ? workers_->size() : 1; }
  // ZeRO-2/3: the units the model is gathered and reduce-scattered in (0: none).
  size_t shard_units() const;

 private:
  struct Replica {
    Device device;  // its GPU (mirrored on GPUs: one each), or the CPU all share
    std::unique_ptr<nn::Sequential> model;
    std::unique_ptr<optim::Optimizer> optimizer;
    std::vector<nn::Param*> trainable;
    std::vector<std::vector<size_t>> layer_params;  // each layer's trainable params, as places in `trainable`
    std::vector<Tensor> accumulated;                     // gradient sums over micro-batches (K > 1)
    Tensor grad_output;
    std::vector<nn::LossRows> rows;             // per micro-batch, read after the step is issued
    std::unique_ptr<comm::Communicator> local;  // mirrored: this replica's member of the local group
    // multi_worker_mirrored with several replicas per task: the local group first,
    // then (replica 0) the tasks' group: a hierarchical communicator
    std::unique_ptr<comm::Communicator> group;
    std::unique_ptr<GradientSync> sync;         // where its gradients are combined (gradient_sync.h)
    std::optional<UpdateStep> update_step;      // unscale or skip, clip, apply (update_step.h)
    nn::LossStats stats;
    double comm_wait = 0.0;  // this step's: waiting for the gradient all-reduces
    double compute = 0.0;    // forward, loss, backward
    double update = 0.0;     // the optimizer
    bool finite = true;      // this step's gradients were finite on every replica (loss scaling)
  };

  // A replica's model (tensor_parallel: its parts), optimizer and placement;
  // its gradients in the workers' shared area where `shared_gradients`.
  void place_replica(Replica& r, const StrategyJob& job, Gradients path, bool shared_gradients);
  // Each replica's gradient sync and update step for `path`; the metrics'
  // ride-along where the sync carries sums.
  void make_syncs(const StrategyJob& job, const StrategyContext& context, Gradients path);
  void replica_step(Replica& r, int index, const std::vector<data::Batch>& micro_batches, int64_t step);
  // The replica's micro-batch `i` of `k`: forward and loss, the gradient of the
  // loss into r.grad_output; returns nothing (r.rows[i] gets the loss rows).
  void forward_and_loss(Replica& r, int index, const data::Batch& task_batch, int64_t i, int64_t k,
                        nn::StepContext& ctx);
  comm::Communicator* group_of(Replica& r);
  // The local replicas' group: NCCL over their GPUs (one communicator each) where
  // the plan says so (StrategyContext::local_nccl), else shared memory.
  static std::vector<std::unique_ptr<comm::Communicator>> make_local_group(const std::vector<Device>& devices,
                                                                           bool nccl);
  // A batch's images and labels on `device`: the staged copies when `b` was
  // staged, else copies started now.
  std::pair<Tensor, Tensor> on_device(const data::Batch& b, const Device& device);
  void stage(const std::vector<data::Batch>& batches);

  struct Staged {
    const float* source = nullptr;  // the host images it was copied from
    Tensor images, labels;
  };

  std::string name_;
  uint64_t seed_;
  int64_t accumulation_;
  int64_t batch_per_replica_;
  comm::Communicator* workers_;
  double mean_replica_rows_;  // StrategyContext's (0: rows are equal)
  std::unique_ptr<nn::Loss> loss_;
  std::vector<Replica> replicas_;
  std::unique_ptr<ReplicaPool> pool_;
  std::unique_ptr<CentralCopy> central_;  // central_storage only
  bool replicas_behind_ = false;          // central_storage: the central copy was updated after the replicas read it
  Device device_;
  std::vector<Staged> staged_;
  int threads_ = 1;
  int threads_each_ = 1;
  StepTimings timings_;
  bool stop_requested_ = false;
  bool stop_agreed_ = false;
  bool metrics_ride_along_ = false;  // the loss sums and stop flag go with the last gradient bucket
  std::unique_ptr<optim::DynamicLossScale> loss_scale_;  // train.precision mixed_float16 only
  // ZeRO-1 (strategy.shard_optimizer_state) / ZeRO-2/3 (strategy.shard "gradients"
  // / "parameters"): replica 0's sync, for the sharded checkpoint's pieces.
  ZeroShard* zero_ = nullptr;
  FullShard* full_ = nullptr;
  std::unique_ptr<TensorParallel> tp_;  // strategy.tensor_parallel
  // tensor_parallel: the grid's groups where this strategy made them (no runtime's).
  std::optional<GridGroups> own_grid_;
  // tensor_parallel: this task's copy's tasks (rank: its part), and the tasks
  // holding its part in the other copies (nullptr with one copy); the grid's groups.
  std::unique_ptr<comm::Communicator> tensor_group_, copies_group_;
  // tensor_parallel with the output layer split by its classes: the loss over the
  // tensor group (vocabulary_loss.h).
  std::unique_ptr<VocabularyParallelLoss> vocabulary_loss_;
};

}  // namespace dtrain::strategy
