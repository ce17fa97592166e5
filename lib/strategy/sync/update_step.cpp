// Implementation of update_step.h.
#include "strategy/sync/update_step.h"

#include "core/check.h"
#include "core/trace.h"
#include "kernels/ops.h"
#include "strategy/sync/shard_pieces.h"

namespace dtrain::strategy {

UpdateStep::UpdateStep(optim::Optimizer& optimizer, const optim::DynamicLossScale* loss_scale,
                       std::optional<SplitNorms> split)
    : optimizer_(optimizer), loss_scale_(loss_scale), split_(std::move(split)) {}

bool UpdateStep::run(GradientSync& sync, bool finite, int64_t step) {
  if (!finite) return false;
  DT_CHECK(sync.updates_replica(), "an update of a replica whose gradients another copy applies");
  const std::vector<nn::Param*>& pieces = sync.pieces();
  if (loss_scale_) {
    const float scale = static_cast<float>(loss_scale_->scale());
    for (nn::Param* p : pieces) kernels::divide(p->grad, scale);
  }
  sync.clip_norms();
  if (split_)
    clip_split_by_norm(pieces, split_->counted, split_->parts, split_->stages, split_->clipnorm,
                       split_->global_clipnorm);
  optimizer_.apply(pieces, loss_scale_ ? loss_scale_->applied_before(step) : step);
  return true;
}

}  // namespace dtrain::strategy
