// Implementation of one_device.h: forward, loss, backward, update on one model.
#include "strategy/one_device.h"

namespace dtrain::strategy {

OneDeviceStrategy::OneDeviceStrategy(const config::JobConfig& job)
    : seed_(job.train.seed),
      model_(job.model, job.train.seed),
      loss_(nn::make_loss(job.loss)),
      optimizer_(optim::make_optimizer(job.optimizer)),
      trainable_(model_.trainable_params()) {}

void OneDeviceStrategy::train_step(const data::Batch& batch, int64_t step, nn::LossStats& stats) {
  const nn::StepContext ctx{true, seed_, step};
  const Tensor output = model_.forward(batch.images, ctx);
  if (!grad_output_.defined() || grad_output_.shape() != output.shape())
    grad_output_ = Tensor(output.shape());
  loss_->compute(output, batch.labels, stats, &grad_output_, 1.0f / static_cast<float>(batch.size()));
  model_.backward(grad_output_);
  optimizer_->apply(trainable_, step);
}

void OneDeviceStrategy::eval_step(const data::Batch& batch, nn::LossStats& stats) {
  const nn::StepContext ctx{false, seed_, 0};
  const Tensor output = model_.forward(batch.images, ctx);
  loss_->compute(output, batch.labels, stats, nullptr, 0.0f);
}

}  // namespace dtrain::strategy
