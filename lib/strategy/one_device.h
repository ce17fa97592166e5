// OneDeviceStrategy: one replica on one device, no gradient exchange (TF's OneDeviceStrategy).
#pragma once

#include "strategy/strategy.h"

namespace dtrain::strategy {

class OneDeviceStrategy : public Strategy {
 public:
  explicit OneDeviceStrategy(const config::JobConfig& job);

  std::string name() const override { return "one_device"; }
  int num_replicas_in_sync() const override { return 1; }
  void train_step(const data::Batch& batch, int64_t step, nn::LossStats& stats) override;
  void eval_step(const data::Batch& batch, nn::LossStats& stats) override;
  nn::Sequential& model() override { return model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }

 private:
  uint64_t seed_;
  nn::Sequential model_;
  std::unique_ptr<nn::Loss> loss_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<nn::Param*> trainable_;
  Tensor grad_output_;
};

}  // namespace dtrain::strategy
