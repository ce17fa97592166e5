// Helpers shared by the optimizer tests: a parameter with given values and
// gradients, and an optimizer spec of a registered type at a constant learning rate.
#pragma once

#include <string>
#include <vector>

#include "nn/layer.h"
#include "optim/optimizer.h"

namespace dtrain::test {

// A 1-D parameter `name` holding `w`, with the gradient `g` (same length).
inline nn::Param make_param(const std::string& name, const std::vector<float>& w, const std::vector<float>& g) {
  const int64_t n = static_cast<int64_t>(w.size());
  nn::Param p{name, Tensor({n}), Tensor({n})};
  for (int64_t i = 0; i < n; ++i) {
    p.value.data()[i] = w[static_cast<size_t>(i)];
    p.grad.data()[i] = g[static_cast<size_t>(i)];
  }
  return p;
}

// The spec of optimizer `type` (its registry defaults) at the constant learning rate `lr`.
inline optim::OptimizerSpec optimizer_spec(const std::string& type, double lr) {
  optim::OptimizerSpec s;
  s.type = &optim::optimizer_type(type);
  s.learning_rate.initial_learning_rate = lr;
  return s;
}

}  // namespace dtrain::test
