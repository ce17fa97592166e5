// Learning-rate schedules (Keras' names): constant, step (staircase exponential
// decay) and cosine decay, each with an optional linear warmup.
#pragma once

#include <cstdint>

#include "config/optimizer_spec.h"

namespace dtrain::optim {

// The learning rate for 0-based training step `step`:
//   warmup:   initial * (step + 1) / warmup_steps       for step < warmup_steps
//   then, with s = step - warmup_steps:
//   constant: initial
//   step:     initial * decay_rate ^ floor(s / decay_steps)
//   cosine:   initial * ((1 - alpha) * 0.5 * (1 + cos(pi * min(s, decay_steps) / decay_steps)) + alpha)
double learning_rate_at(const config::LearningRateSpec& spec, int64_t step);

}  // namespace dtrain::optim
