// Optimizers: update trainable params from their gradients, Keras' formulas.
//
//   sgd:      v = momentum * v - lr * g;  w += v        (nesterov: w += momentum * v - lr * g)
//   adam:     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//             w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
//   adamw:    w -= lr * weight_decay * w, then the adam step
//   rmsprop:  v = rho v + (1-rho) g^2;  w -= lr * g / sqrt(v + eps)
//             (centered: a = rho a + (1-rho) g, sqrt(v - a^2 + eps); momentum: m = momentum m + step, w -= m)
//   adagrad:  a += g^2;  w -= lr * g / sqrt(a + eps)     (a starts at initial_accumulator_value)
// Every optimizer first clips the gradients (clipnorm, clipvalue, global_clipnorm: clipping.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optim/clipping.h"
#include "optim/optimizer_spec.h"
#include "nn/layer.h"
#include "tensor/arena.h"

namespace dtrain::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every param (each must have a grad), as training step `step` (0-based):
  // clips the grads in place (the spec's clipping), then update().
  void apply(const std::vector<nn::Param*>& params, int64_t step);
  // The learning rate used at `step`.
  double learning_rate(int64_t step) const;
  // Optimizer state tensors (slots), named like "dense/kernel/m", in a fixed order:
  // slot-major (slot k of every param, then slot k + 1), as checkpoints and ps tasks expect.
  virtual std::vector<nn::Param*> state() { return {}; }
  // State tensors per trainable param (sgd: 0 or 1, adam: 2, rmsprop: 1 to 3, adagrad: 1), for sizing an arena.
  virtual int slots_per_param() const { return 0; }
  // Creates the state slots for `params` now (apply() otherwise does it on its
  // first call, on the params' device), taking them from `arena` when given: with
  // the params and grads in the same arena, one fused update covers all params.
  virtual void create_state(const std::vector<nn::Param*>& params, TensorArena* arena = nullptr) {}

 protected:
  explicit Optimizer(const OptimizerSpec& spec) : spec_(spec), clipper_(spec) {}
  // The optimizer's own update from the (clipped) gradients.
  virtual void update(const std::vector<nn::Param*>& params, int64_t step) = 0;
  OptimizerSpec spec_;

 private:
  GradientClipper clipper_;
};

// The optimizer registry: each `optimizer` type with its keys, its reader and its
// builder. Adding an optimizer: its class and its entry in optimizer.cpp's
// optimizer_types() (its fields in OptimizerSpec).
struct OptimizerType {
  std::string name;                  // "adam", Keras' name
  std::string doc;                   // one line for the README's table
  std::vector<config::KeyDoc> keys;  // beyond "type" and "learning_rate"
  double default_learning_rate = 0.001;
  std::function<void(config::Section& r, OptimizerSpec& spec)> read;  // its keys into spec
  std::function<std::unique_ptr<Optimizer>(const OptimizerSpec&)> make;
};
const std::vector<OptimizerType>& optimizer_types();
// The entry named `name`; ConfigError listing the valid names otherwise.
const OptimizerType& optimizer_type(const std::string& name);

// The entry of `spec` (adam, Keras' default here, for a spec made in code without a type).
const OptimizerType& optimizer_type_of(const OptimizerSpec& spec);

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec);

}  // namespace dtrain::optim
