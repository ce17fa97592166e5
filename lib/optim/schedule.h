// Learning-rate schedules (Keras' names): constant, step (staircase exponential
// decay) and cosine decay, each with an optional linear warmup; the schedule
// registry (each schedule type's keys, reader and formula, in schedule.cpp).
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
};
const std::vector<ScheduleType>& schedule_types();
// The entry named `name`; ConfigError listing the valid names otherwise.
const ScheduleType& schedule_type(const std::string& name);

// The learning rate for 0-based training step `step`:
//   warmup:   initial * (step + 1) / warmup_steps       for step < warmup_steps
//   then, with s = step - warmup_steps, the schedule's formula:
//   constant: initial
//   step:     initial * decay_rate ^ floor(s / decay_steps)
//   cosine:   initial * ((1 - alpha) * 0.5 * (1 + cos(pi * min(s, decay_steps) / decay_steps)) + alpha)
double learning_rate_at(const LearningRateSpec& spec, int64_t step);

}  // namespace dtrain::optim
