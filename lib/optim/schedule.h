// Learning-rate schedules (Keras' names): constant, step (staircase exponential
// decay), cosine decay, exponential_decay, piecewise_constant and
// polynomial_decay, each with an optional linear warmup; the schedule registry
// (each schedule type's keys, reader and formula, in schedule.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optim/optimizer_spec.h"

namespace dtrain::optim {

struct ScheduleType {
  std::string name;                  // "cosine", Keras' name
  std::string doc;                   // the formula, for the README
  std::vector<config::KeyDoc> keys;  // beyond "type", "initial_learning_rate", "warmup_steps"
  std::function<void(config::Section& r, LearningRateSpec& spec)> read;  // its keys into spec
  // The rate `s` steps after the warmup.
  std::function<double(const LearningRateSpec& spec, int64_t s)> rate;
  // False for piecewise_constant: its rates are its values (initial_learning_rate = values[0]).
  bool takes_initial_learning_rate = true;
};
const std::vector<ScheduleType>& schedule_types();
// The entry named `name`; ConfigError listing the valid names otherwise.
const ScheduleType& schedule_type(const std::string& name);

// The learning rate for 0-based training step `step` (Keras' optimizer.iterations
// before the update: 0 for the first update):
//   warmup:   initial * (step + 1) / warmup_steps       for step < warmup_steps
//   then, with s = step - warmup_steps, the schedule's formula:
//   constant: initial
//   step:     initial * decay_rate ^ floor(s / decay_steps)
//   cosine:   initial * ((1 - alpha) * 0.5 * (1 + cos(pi * min(s, decay_steps) / decay_steps)) + alpha)
//   exponential_decay:  initial * decay_rate ^ (s / decay_steps)   (staircase: floor(s / decay_steps))
//   piecewise_constant: values[0] for s <= boundaries[0], values[i] for boundaries[i-1] < s <= boundaries[i],
//                       values[n] for s > boundaries[n-1]
//   polynomial_decay:   (initial - end) * (1 - min(s, d) / d) ^ power + end, d = decay_steps
//                       (cycle: d = decay_steps * ceil(s / decay_steps), 1 for s = 0, and s not capped)
double learning_rate_at(const LearningRateSpec& spec, int64_t step);

}  // namespace dtrain::optim
