// Optimizers: update trainable params from their gradients, Keras' formulas.
//
//   sgd:      v = momentum * v - lr * g;  w += v        (nesterov: w += momentum * v - lr * g)
//   adam:     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//             w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
//   adamw:    w -= lr * weight_decay * w, then the adam step
#pragma once

#include <memory>
#include <vector>

#include "config/optimizer_spec.h"
#include "nn/layer.h"
#include "tensor/arena.h"

namespace dtrain::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every param (each must have a grad), as training step `step` (0-based).
  virtual void apply(const std::vector<nn::Param*>& params, int64_t step) = 0;
  // The learning rate used at `step`.
  double learning_rate(int64_t step) const;
  // Optimizer state tensors (slots), named like "dense/kernel/m", in a fixed order.
  virtual std::vector<nn::Param*> state() { return {}; }
  // State tensors per trainable param (sgd: 0 or 1, adam: 2), for sizing an arena.
  virtual int slots_per_param() const { return 0; }
  // Creates the state slots for `params` now (apply() otherwise does it on its
  // first call, on the params' device), taking them from `arena` when given: with
  // the params and grads in the same arena, one fused update covers all params.
  virtual void create_state(const std::vector<nn::Param*>& params, TensorArena* arena = nullptr) {}

 protected:
  explicit Optimizer(const config::OptimizerSpec& spec) : spec_(spec) {}
  config::OptimizerSpec spec_;
};

std::unique_ptr<Optimizer> make_optimizer(const config::OptimizerSpec& spec);

}  // namespace dtrain::optim
