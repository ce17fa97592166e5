// Implementation of loss_scale.h.
#include "optim/loss_scale.h"

#include <cmath>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::optim {

DynamicLossScale::DynamicLossScale(double initial_scale, int64_t growth_steps) : growth_steps_(growth_steps) {
  if (!(initial_scale > 0.0) || !std::isfinite(initial_scale))
    throw ConfigError(str("loss scale: the initial scale must be positive and finite, not ", initial_scale));
  if (growth_steps < 1) throw ConfigError(str("loss scale: the growth interval must be at least 1 step"));
  state_.scale = initial_scale;
}

bool DynamicLossScale::update(bool finite) {
  if (!finite) {
    state_.scale *= 0.5;
    state_.good_steps = 0;
    state_.skipped_steps += 1;
    return false;
  }
  // Keras compares the counter before counting this step: the growth_steps-th
  // finite step in a row doubles the scale for the next one.
  if (state_.good_steps == growth_steps_ - 1) {
    state_.scale *= 2.0;
    state_.good_steps = 0;
  } else {
    state_.good_steps += 1;
  }
  return true;
}

void DynamicLossScale::restore(const LossScaleState& state) {
  if (!(state.scale > 0.0) || !std::isfinite(state.scale))
    throw ConfigError(str("the checkpoint's loss scale ", state.scale, " is not a positive finite number"));
  if (state.good_steps < 0 || state.skipped_steps < 0)
    throw ConfigError("the checkpoint's loss-scale counters are negative");
  state_ = state;
}

}  // namespace dtrain::optim
