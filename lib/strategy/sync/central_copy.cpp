// Implementation of central_copy.h.
#include "strategy/sync/central_copy.h"

#include "core/check.h"
#include "kernels/ops.h"

namespace dtrain::strategy {

CentralCopy::CentralCopy(const StrategyJob& job)
    : model_(std::make_unique<nn::Sequential>(job.model, job.train.seed)),  // same seed as the replicas
      optimizer_(optim::make_optimizer(job.optimizer)) {
  model_->place(Device::cpu(), optimizer_->slots_per_param());
  params_ = model_->params();
  trainable_ = model_->trainable_params();
  optimizer_->create_state(trainable_, model_->arena());
  sync_ = std::make_unique<NoSync>(trainable_);
  update_.emplace(*optimizer_, nullptr);
}

void CentralCopy::read_into(nn::Sequential& replica) const {
  const std::vector<nn::Param*> theirs = replica.params();
  DT_CHECK_EQ(theirs.size(), params_.size());
  for (size_t i = 0; i < theirs.size(); ++i) theirs[i]->value.copy_from(params_[i]->value);
}

namespace {

// The mean of `tensors` (one per replica, in replica order) into `into`.
void mean_into(Tensor& into, const std::vector<const Tensor*>& tensors) {
  Tensor staged;  // a replica's tensor on the host, when it lives on a GPU
  for (size_t r = 0; r < tensors.size(); ++r) {
    const Tensor& t = *tensors[r];
    if (r == 0) {
      into.copy_from(t);
    } else if (t.device().is_cpu()) {
      kernels::axpy(1.0f, t, into);
    } else {
      if (!staged.defined()) staged = Tensor(into.shape());
      staged.copy_from(t);
      kernels::axpy(1.0f, staged, into);
    }
  }
  if (tensors.size() > 1) kernels::divide(into, static_cast<float>(tensors.size()));
}

}  // namespace

void CentralCopy::apply(const std::vector<nn::Sequential*>& replicas, int64_t step) {
  DT_CHECK(!replicas.empty(), "central_storage needs a replica");
  std::vector<std::vector<nn::Param*>> theirs;
  for (nn::Sequential* r : replicas) theirs.push_back(r->params());
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Param& p = *params_[i];
    std::vector<const Tensor*> tensors;
    for (const auto& params : theirs) tensors.push_back(p.trainable() ? &params[i]->grad : &params[i]->value);
    mean_into(p.trainable() ? p.grad : p.value, tensors);
  }
  update_->run(*sync_, /*finite=*/true, step);
}

}  // namespace dtrain::strategy
