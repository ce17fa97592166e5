// Implementation of schedule.h: the schedule table, one entry per schedule, with
// Keras' formulas (keras/src/optimizers/schedules/learning_rate_schedule.py).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::optim {
namespace {

constexpr const char* kPiecewiseHint =
    " (e.g. \"boundaries\": [1000, 2000], \"values\": [0.1, 0.01, 0.001]: 0.1 up to step 1000, 0.01 up to "
    "2000, then 0.001)";

// piecewise_constant's boundaries (strictly increasing steps) and values (one more).
void read_piecewise(config::Section& r, LearningRateSpec& spec) {
  const config::Value b = r.require("boundaries", kPiecewiseHint);
  const config::Value v = r.require("values", kPiecewiseHint);
  if (!b.is_array() || b.size() == 0)
    b.fail(str("expected a non-empty array of increasing steps such as [1000, 2000], got ", b.describe()));
  if (!v.is_array())
    v.fail(str("expected an array of learning rates such as [0.1, 0.01, 0.001], got ", v.describe()));
  spec.boundaries.clear();
  spec.values.clear();
  for (size_t i = 0; i < b.size(); ++i) {
    const config::Value e = b.at(i);
    spec.boundaries.push_back(e.to_int(0));
    if (i > 0 && spec.boundaries[i] <= spec.boundaries[i - 1])
      e.fail(str("boundaries must increase strictly: ", spec.boundaries[i], " follows ", spec.boundaries[i - 1]));
  }
  if (v.size() != b.size() + 1)
    v.fail(str("expected ", b.size() + 1, " values, one more than the ", b.size(),
               " boundaries (values[i] up to boundaries[i], the last one after them), got ", v.size()));
  for (size_t i = 0; i < v.size(); ++i) spec.values.push_back(v.at(i).to_double(config::kNonNegative));
  spec.initial_learning_rate = spec.values[0];  // what a warmup ramps up to
}

double piecewise_rate(const LearningRateSpec& spec, int64_t s) {
  // The first boundary at or after s picks its value; after the last one, the last value.
  const auto it = std::lower_bound(spec.boundaries.begin(), spec.boundaries.end(), s);
  return spec.values[static_cast<size_t>(it - spec.boundaries.begin())];
}

double polynomial_rate(const LearningRateSpec& spec, int64_t s) {
  double steps = static_cast<double>(spec.decay_steps);
  double x = static_cast<double>(s);
  if (spec.cycle)
    steps *= s == 0 ? 1.0 : std::ceil(x / steps);  // the first multiple of decay_steps >= s
  else
    x = std::min(x, steps);
  const double p = x / steps;
  return (spec.initial_learning_rate - spec.end_learning_rate) * std::pow(1.0 - p, spec.power) +
         spec.end_learning_rate;
}

}  // namespace

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
      {"exponential_decay", "`lr * decay_rate^(s / decay_steps)` (staircase: `floor(s / decay_steps)`)",
       {{"decay_steps", "required, >= 1"}, {"decay_rate", "required, > 0"}, {"staircase", "false"}},
       [](config::Section& r, LearningRateSpec& spec) {
         spec.decay_steps = r.require_int("decay_steps", 1);
         spec.decay_rate = r.require_double("decay_rate", config::kPositive);
         spec.staircase = r.get_bool("staircase", spec.staircase);
       },
       [](const LearningRateSpec& spec, int64_t s) {
         double p = static_cast<double>(s) / static_cast<double>(spec.decay_steps);
         if (spec.staircase) p = std::floor(p);
         return spec.initial_learning_rate * std::pow(spec.decay_rate, p);
       }},
      {"piecewise_constant",
       "`values[0]` while `s <= boundaries[0]`, `values[i]` while `boundaries[i-1] < s <= boundaries[i]`, "
       "`values[-1]` after; no `initial_learning_rate` (a warmup ramps to `values[0]`)",
       {{"boundaries", "required, strictly increasing steps >= 0"},
        {"values", "required, one more rate than boundaries, each >= 0"}},
       read_piecewise, piecewise_rate, false},
      {"polynomial_decay",
       "`(lr - end_learning_rate) * (1 - min(s, decay_steps) / decay_steps)^power + end_learning_rate` "
       "(cycle: over `decay_steps * ceil(s / decay_steps)` instead)",
       {{"decay_steps", "required, >= 1"}, {"end_learning_rate", "0.0001, >= 0"}, {"power", "1.0, > 0"},
        {"cycle", "false"}},
       [](config::Section& r, LearningRateSpec& spec) {
         spec.decay_steps = r.require_int("decay_steps", 1);
         spec.end_learning_rate = r.get_double("end_learning_rate", spec.end_learning_rate, config::kNonNegative);
         spec.power = r.get_double("power", spec.power, config::kPositive);
         spec.cycle = r.get_bool("cycle", spec.cycle);
       },
       polynomial_rate},
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
