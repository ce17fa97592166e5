// Losses over class labels: sparse/categorical cross-entropy (from logits or from
// probabilities) and mean squared error against one-hot targets.
//
// Integer labels serve all three (categorical targets are the labels' one-hot
// form). The gradient is that of the mean over the batch, scaled by grad_scale
// (1/N for a plain batch; the strategy may pass 1/global_batch).
#pragma once

#include <memory>
#include <vector>

#include "config/job_config.h"
#include "tensor/tensor.h"

namespace dtrain::nn {

struct LossStats {
  double loss_sum = 0.0;  // sum of per-sample losses
  int64_t correct = 0;    // samples whose argmax equals the label
  int64_t count = 0;      // samples seen
};

class Loss {
 public:
  virtual ~Loss() = default;
  // output (N, C), labels N values in [0, C). Adds to stats; when grad is given,
  // writes d(sum of losses * grad_scale)/d(output) into it (shape (N, C)).
  virtual void compute(const Tensor& output, const std::vector<int32_t>& labels, LossStats& stats,
                       Tensor* grad, float grad_scale) const = 0;
};

std::unique_ptr<Loss> make_loss(const config::LossSpec& spec);

}  // namespace dtrain::nn
