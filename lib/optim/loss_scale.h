// Dynamic loss scaling for train.precision mixed_float16, Keras 3's
// LossScaleOptimizer rule:
//
//   the loss (so every gradient) is multiplied by scale(), the gradients are
//   divided by it again before the optimizer sees them;
//   finite gradients:      the step is applied; after dynamic_growth_steps such
//                          steps in a row the scale doubles (the counter restarts);
//   an inf or NaN anywhere: the step is skipped (parameters and optimizer state
//                          untouched), the scale halves and the counter restarts.
//
// Keras starts at 2^15 and grows every 2000 finite steps. Its scale has no floor;
// neither has this one (150 skipped steps in a row would take it to 0).
//
// This class is only the rule; the strategy decides "finite" (the same answer on
// every replica) and does the scaling. The state is three numbers, saved in
// checkpoints so a resumed run continues with the same scale.
#pragma once

#include <cstdint>

namespace dtrain::optim {

struct LossScaleState {
  double scale = 32768.0;     // the current loss scale (2^15 at the start)
  int64_t good_steps = 0;     // finite steps since the scale last changed
  int64_t skipped_steps = 0;  // steps skipped for non-finite gradients, in all
};

class DynamicLossScale {
 public:
  static constexpr double kInitialScale = 32768.0;  // 2^15, Keras' initial_scale
  static constexpr int64_t kGrowthSteps = 2000;     // Keras' dynamic_growth_steps

  explicit DynamicLossScale(double initial_scale = kInitialScale, int64_t growth_steps = kGrowthSteps);

  // The factor the loss is multiplied by in this step.
  double scale() const { return state_.scale; }
  // After a step's gradients are known (and agreed across replicas): whether they
  // were all finite. Returns true when the step must be applied, false when it
  // must be skipped; updates the scale for the next step.
  bool update(bool finite);

  // Steps whose update was applied before training step `step` (0-based): the
  // step number the optimizer should see, so skipped steps advance neither
  // Adam's bias correction nor a learning-rate schedule (as in Keras, where a
  // skipped step leaves the inner optimizer's iterations alone).
  int64_t applied_before(int64_t step) const { return step - state_.skipped_steps; }

  const LossScaleState& state() const { return state_; }
  // A checkpoint's state; ConfigError for a scale that is not positive and finite.
  void restore(const LossScaleState& state);

 private:
  int64_t growth_steps_;
  LossScaleState state_;
};

}  // namespace dtrain::optim
