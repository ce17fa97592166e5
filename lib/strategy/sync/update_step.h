// UpdateStep: the end of a training step, written once for every strategy that
// updates parameters itself (data parallelism in all its forms, central_storage's
// central copy, pipelines; a parameter_server's update is the ps task's):
// after the gradient sync has made the gradients the group's mean,
//
//   1. loss scaling: a step with an inf or NaN anywhere is skipped (the caller
//      learned that from the sync, or from the stages' agreement); else the
//      gradients are divided by the scale;
//   2. clipping by the right norm: each param's norm over every task's slice
//      (ZeRO: GradientSync::clip_norms), or over the parts of split tensors and
//      the other stages (SplitNorms: tensor_parallel, a pipeline's
//      global_clipnorm); the optimizer clips the rest itself (clipnorm of whole
//      tensors, clipvalue);
//   3. the optimizer's update of the sync's pieces, as the step the optimizer
//      counts (loss scaling: the steps applied before this one).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "strategy/sync/gradient_sync.h"

namespace dtrain::strategy {

// Norm clipping over more than this task's whole tensors (shard_pieces.h's
// clip_split_by_norm): the optimizer was made without norm clipping then.
struct SplitNorms {
  std::vector<bool> counted;              // each piece's sum of squares counts on this task
  comm::Communicator* parts = nullptr;    // the tensor parts' group (nullptr: none)
  comm::Communicator* stages = nullptr;   // a pipeline's stages (global_clipnorm over all of them)
  double clipnorm = 0.0, global_clipnorm = 0.0;
};

class UpdateStep {
 public:
  // `loss_scale` (nullptr: none) is the strategy's; UpdateStep reads it, the
  // strategy updates it once per step after every replica's update.
  UpdateStep(optim::Optimizer& optimizer, const optim::DynamicLossScale* loss_scale,
             std::optional<SplitNorms> split = std::nullopt);

  // The update of training step `step` on sync.pieces(), when `finite` (false:
  // skipped, nothing changes). Returns whether it applied.
  bool run(GradientSync& sync, bool finite, int64_t step);

 private:
  optim::Optimizer& optimizer_;
  const optim::DynamicLossScale* loss_scale_;
  std::optional<SplitNorms> split_;
};

}  // namespace dtrain::strategy
