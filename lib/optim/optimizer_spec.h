// OptimizerSpec and LearningRateSpec: the typed `optimizer` section of a job
// (Keras' names), read through optim's registries (optimizer.h, schedule.h).
#pragma once

#include <cstdint>
#include <string>

#include "config/section.h"

namespace dtrain::optim {

struct OptimizerType;  // optimizer.h
struct ScheduleType;   // schedule.h

// A learning rate: a constant, or a schedule with optional linear warmup.
struct LearningRateSpec {
  std::string path = "optimizer.learning_rate";
  const ScheduleType* type = nullptr;  // nullptr: constant
  double initial_learning_rate = 0.001;
  int64_t decay_steps = 0;  // step, cosine (> 0 for them)
  double decay_rate = 0.1;  // step: lr * decay_rate^floor(step / decay_steps)
  double alpha = 0.0;       // cosine: final lr = initial * alpha
  int64_t warmup_steps = 0; // linear warmup from 0 to the initial rate
};

struct OptimizerSpec {
  std::string path = "optimizer";
  const OptimizerType* type = nullptr;  // nullptr (a spec made in code): adam
  LearningRateSpec learning_rate;
  double momentum = 0.0;        // sgd
  bool nesterov = false;        // sgd
  double beta_1 = 0.9;          // adam, adamw
  double beta_2 = 0.999;        // adam, adamw
  double epsilon = 1e-7;        // adam, adamw
  double weight_decay = 0.004;  // adamw (Keras' default)
};

// Reads the optimizer: a name ("adam"), or an object with "type", "learning_rate"
// (a number or a schedule) and the type's own keys.
OptimizerSpec read_optimizer_spec(const config::Value& value);
// A number, or a schedule object {"type": "cosine", ...}.
LearningRateSpec read_learning_rate_spec(const config::Value& value);

}  // namespace dtrain::optim
