// Strategy: how a training step runs on this task's replicas and how their
// gradients are combined, in tf.distribute's terms.
//
// A strategy owns the model replicas, the loss and the optimizer. The trainer
// hands it this task's batch for each step; the strategy runs forward/backward,
// combines gradients (nothing to combine for one_device; an all-reduce for the
// mirrored strategies), and applies the update. Today: one_device.
#pragma once

#include <memory>
#include <string>

#include "config/job_config.h"
#include "data/pipeline.h"
#include "nn/losses.h"
#include "nn/sequential.h"
#include "optim/optimizer.h"

namespace dtrain::strategy {

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Replicas that train in lock-step across the whole job (TF's num_replicas_in_sync).
  virtual int num_replicas_in_sync() const = 0;

  // One training step (0-based `step`) on this task's batch; adds loss/accuracy to stats.
  virtual void train_step(const data::Batch& batch, int64_t step, nn::LossStats& stats) = 0;
  // Forward pass in inference mode; adds loss/accuracy to stats.
  virtual void eval_step(const data::Batch& batch, nn::LossStats& stats) = 0;

  // The model whose parameters are reported (replica 0's).
  virtual nn::Sequential& model() = 0;
  virtual optim::Optimizer& optimizer() = 0;
};

std::unique_ptr<Strategy> make_strategy(const config::JobConfig& job);

}  // namespace dtrain::strategy
