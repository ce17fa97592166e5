// OptimizerSpec and LearningRateSpec: the typed `optimizer` section of a job
// (Keras' names), what lib/optim builds from. Parsed and checked by job_config.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::config {

// A learning rate: a constant, or a schedule with optional linear warmup.
struct LearningRateSpec {
  std::string path = "optimizer.learning_rate";
  std::string type = "constant";     // constant | step | cosine
  double initial_learning_rate = 0.001;
  int64_t decay_steps = 0;           // step, cosine (> 0 for them)
  double decay_rate = 0.1;           // step: lr * decay_rate^floor(step / decay_steps)
  double alpha = 0.0;                // cosine: final lr = initial * alpha
  int64_t warmup_steps = 0;          // linear warmup from 0 to the initial rate
};

struct OptimizerSpec {
  std::string path = "optimizer";
  std::string type = "adam";  // sgd | adam | adamw
  LearningRateSpec learning_rate;
  double momentum = 0.0;      // sgd
  bool nesterov = false;      // sgd
  double beta_1 = 0.9;        // adam, adamw
  double beta_2 = 0.999;      // adam, adamw
  double epsilon = 1e-7;      // adam, adamw
  double weight_decay = 0.004;  // adamw (Keras' default)
};

}  // namespace dtrain::config
