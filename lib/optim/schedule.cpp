// Implementation of schedule.h.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace dtrain::optim {

double learning_rate_at(const config::LearningRateSpec& spec, int64_t step) {
  const double initial = spec.initial_learning_rate;
  if (step < spec.warmup_steps)
    return initial * static_cast<double>(step + 1) / static_cast<double>(spec.warmup_steps);
  const int64_t s = step - spec.warmup_steps;
  if (spec.type == "step")
    return initial * std::pow(spec.decay_rate, static_cast<double>(s / spec.decay_steps));
  if (spec.type == "cosine") {
    const double progress =
        static_cast<double>(std::min(s, spec.decay_steps)) / static_cast<double>(spec.decay_steps);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
    return initial * ((1.0 - spec.alpha) * cosine + spec.alpha);
  }
  return initial;
}

}  // namespace dtrain::optim
