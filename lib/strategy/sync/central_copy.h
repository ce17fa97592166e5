// CentralCopy: central_storage's variables (TF's CentralStorageStrategy). One copy
// of the model's parameters and the optimizer with its slots lives on the host
// ("CPU"); the compute replicas read it at the start of every step, their
// gradients are averaged into it (in replica order: deterministic) and the
// optimizer runs once per step on it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "nn/sequential.h"
#include "optim/optimizer.h"
#include "strategy/strategy.h"
#include "strategy/sync/gradient_sync.h"
#include "strategy/sync/update_step.h"

namespace dtrain::strategy {

class CentralCopy {
 public:
  explicit CentralCopy(const StrategyJob& job);

  // Copies the central values (parameters and non-trainable state) into a
  // replica's own params; safe to call from several replicas' threads at once.
  void read_into(nn::Sequential& replica) const;
  // The mean of the replicas' gradients into the central gradients, one update
  // as training step `step`, and the mean of their non-trainable state (batch-norm
  // moving statistics) as the new central state.
  void apply(const std::vector<nn::Sequential*>& replicas, int64_t step);

  nn::Sequential& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  std::unique_ptr<nn::Sequential> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<nn::Param*> params_;     // every param, in params() order
  std::vector<nn::Param*> trainable_;  // the trainable ones
  // The one update tail (update_step.h) on the central gradients: nothing to
  // combine further (NoSync), no loss scaling (central_storage refuses it).
  std::unique_ptr<NoSync> sync_;
  std::optional<UpdateStep> update_;
};

}  // namespace dtrain::strategy
