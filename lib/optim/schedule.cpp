// Implementation of schedule.h: the schedule table, one entry per schedule.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::optim {

const std::vector<ScheduleType>& schedule_types() {
  static const std::vector<ScheduleType> table = {
      {"constant", "`lr`", {}, [](config::Section&, LearningRateSpec&) {},
       [](const LearningRateSpec& spec, int64_t) { return spec.initial_learning_rate; }},
      {"step", "`lr * decay_rate^floor(s / decay_steps)`",
       {{"decay_steps", "required, >= 1"}, {"decay_rate", "0.1, > 0"}},
       [](config::Section& r, LearningRateSpec& spec) {
         spec.decay_steps = r.require_int("decay_steps", 1);
         spec.decay_rate = r.get_double("decay_rate", spec.decay_rate, config::kPositive);
       },
       [](const LearningRateSpec& spec, int64_t s) {
         return spec.initial_learning_rate * std::pow(spec.decay_rate, static_cast<double>(s / spec.decay_steps));
       }},
      {"cosine", "decays to `alpha * lr` over `decay_steps`",
       {{"decay_steps", "required, >= 1"}, {"alpha", "0, in [0, 1]"}},
       [](config::Section& r, LearningRateSpec& spec) {
         spec.decay_steps = r.require_int("decay_steps", 1);
         spec.alpha = r.get_double("alpha", spec.alpha, config::kUnitInterval);
       },
       [](const LearningRateSpec& spec, int64_t s) {
         const double progress =
             static_cast<double>(std::min(s, spec.decay_steps)) / static_cast<double>(spec.decay_steps);
         const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
         return spec.initial_learning_rate * ((1.0 - spec.alpha) * cosine + spec.alpha);
       }},
  };
  return table;
}

const ScheduleType& schedule_type(const std::string& name) {
  return config::find_entry(schedule_types(), name, "learning-rate schedule");
}

double learning_rate_at(const LearningRateSpec& spec, int64_t step) {
  const double initial = spec.initial_learning_rate;
  if (step < spec.warmup_steps)
    return initial * static_cast<double>(step + 1) / static_cast<double>(spec.warmup_steps);
  if (!spec.type) return initial;
  return spec.type->rate(spec, step - spec.warmup_steps);
}

}  // namespace dtrain::optim
