// OptimizerSpec and LearningRateSpec: the typed `optimizer` section of a job
// (Keras' names), read through optim's registries (optimizer.h, schedule.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/section.h"

namespace dtrain::optim {

struct OptimizerType;  // optimizer.h
struct ScheduleType;   // schedule.h

// A learning rate: a constant, or a schedule with optional linear warmup.
struct LearningRateSpec {
  std::string path = "optimizer.learning_rate";
  const ScheduleType* type = nullptr;  // nullptr: constant
  double initial_learning_rate = 0.001;  // piecewise_constant: values[0]
  int64_t decay_steps = 0;  // step, cosine, exponential_decay, polynomial_decay (> 0 for them)
  double decay_rate = 0.1;  // step, exponential_decay: lr * decay_rate^(step / decay_steps)
  bool staircase = false;   // exponential_decay: floor(step / decay_steps)
  double alpha = 0.0;       // cosine: final lr = initial * alpha
  std::vector<int64_t> boundaries;  // piecewise_constant: increasing steps
  std::vector<double> values;       // piecewise_constant: one more than boundaries
  double end_learning_rate = 0.0001;  // polynomial_decay
  double power = 1.0;                 // polynomial_decay
  bool cycle = false;                 // polynomial_decay: restart at each multiple of decay_steps
  int64_t warmup_steps = 0; // linear warmup from 0 to the initial rate
};

struct OptimizerSpec {
  std::string path = "optimizer";
  const OptimizerType* type = nullptr;  // nullptr (a spec made in code): adam
  LearningRateSpec learning_rate;
  double momentum = 0.0;        // sgd, rmsprop
  bool nesterov = false;        // sgd
  double beta_1 = 0.9;          // adam, adamw
  double beta_2 = 0.999;        // adam, adamw
  double epsilon = 1e-7;        // adam, adamw, rmsprop, adagrad
  double weight_decay = 0.004;  // adamw (Keras' default)
  double rho = 0.9;             // rmsprop: decay of the mean square
  bool centered = false;        // rmsprop
  double initial_accumulator_value = 0.1;  // adagrad
  // Gradient clipping, every optimizer (clipping.h); 0: off. At most one is set.
  double clipnorm = 0.0;         // each param's gradient to norm <= clipnorm
  double clipvalue = 0.0;        // each element to [-clipvalue, clipvalue]
  double global_clipnorm = 0.0;  // all gradients together to global norm <= global_clipnorm
};

// Reads the optimizer: a name ("adam"), or an object with "type", "learning_rate"
// (a number or a schedule) and the type's own keys.
OptimizerSpec read_optimizer_spec(const config::Value& value);
// A number, or a schedule object {"type": "cosine", ...}.
LearningRateSpec read_learning_rate_spec(const config::Value& value);

}  // namespace dtrain::optim
