// ParameterServerStrategy: TF's ParameterServerStrategy from a task's side. The
// variables and the optimizer live on the ps tasks (ps::PsServer); this task
// keeps a local model to compute with.
//
// On a worker, train_step uses the values of its last push's reply (or a first
// pull), computes the gradients of its batch, and pushes them to every ps, one
// request per ps; the reply, the values after the push was applied, is read at
// the start of the next step: the pull of the next step overlaps the time until
// then. On the coordinator, sync_state() fetches the values (and the optimizer's
// slots) into the local model for evaluation and checkpoints, and load_state()
// puts a checkpoint's state on the ps tasks. The optimizer's gradient clipping
// runs on the worker, over whole gradients, before the push: a ps holds only
// shards of a variable (optim/clipping.h).
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/manifest.h"
#include "strategy/strategy.h"

namespace dtrain::strategy {

class ParameterServerStrategy : public Strategy {
 public:
  ParameterServerStrategy(const StrategyJob& job, const StrategyContext& context);
  ~ParameterServerStrategy() override;

  std::string name() const override { return "parameter_server"; }
  int num_replicas_in_sync() const override { return 1; }  // TF's: each worker steps on its own
  int local_replicas() const override { return 1; }
  void train_step(const std::vector<data::Batch>& micro_batches, int64_t step, nn::LossStats& stats,
                  const std::vector<data::Batch>* upcoming) override;
  void eval_step(const data::Batch& batch, nn::LossStats& stats) override;
  void sync_state() override;
  void request_stop() override { stop_requested_ = true; }
  bool stop_agreed() const override { return stop_requested_; }
  void load_state(const TensorLookup& model, const TensorLookup& optimizer) override;
  nn::Sequential& model() override { return *model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }
  StepTimings timings() const override { return timings_; }

  // The version (updates applied on ps:0) of the values last received.
  int64_t version() const { return version_; }
  // Waits for the reply of the last push (a worker does this before it leaves).
  void drain();
  // Coordinator: puts the local model's values and optimizer slots (loaded from a
  // checkpoint by load_state) on every ps, continuing from update `version`.
  void assign_to_ps(int64_t version);
  // The layout of the checkpoint files the ps tasks write (ps_checkpoint.h), for
  // this model's placement and this optimizer's slots.
  checkpoint::ShardedLayout checkpoint_layout();

 private:
  void receive_values();  // the outstanding reply into the model's params
  // The local optimizer's slot `k` of variable `v` (trainable), or nullptr.
  nn::Param* slot(int k, int v);

  ps::PsGroup& group_;
  uint64_t seed_;
  std::unique_ptr<nn::Loss> loss_;
  std::unique_ptr<nn::Sequential> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;  // its slots hold the fetched state (coordinator)
  optim::GradientClipper clipper_;  // the optimizer's clipping, on whole gradients before the push
  std::vector<nn::Param*> params_, trainable_;
  std::vector<Tensor> accumulated_, before_;  // gradient sums (K > 1); non-trainable values as pulled
  std::vector<std::vector<float>> values_, payloads_;
  Tensor grad_output_;
  int64_t clock_ = 0;    // pushes made
  int64_t version_ = -1;
  StepTimings timings_;
  bool stop_requested_ = false;
};

}  // namespace dtrain::strategy
