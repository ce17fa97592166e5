// Losses over class labels: sparse/categorical cross-entropy (from logits or from
// probabilities) and mean squared error against one-hot targets.
//
// Integer labels serve all three (categorical targets are the labels' one-hot
// form). The gradient is that of the mean over the batch, scaled by grad_scale
// (1/N for a plain batch; the strategy may pass 1/global_batch). The per-row
// work is kernels::class_loss on the output's device.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/model_spec.h"
#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace dtrain::nn {

struct LossStats {
  double loss_sum = 0.0;  // sum of per-sample losses
  int64_t correct = 0;    // samples whose argmax equals the label
  int64_t count = 0;      // samples seen
  // Adds another batch's (or replica's, or work unit's) sums.
  void add(const LossStats& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
  }
};

// Per-row results of a loss, on the output's device, read later by add_stats()
// (so a GPU step need not wait for them before its backward pass is issued).
struct LossRows {
  Tensor both;       // (2N): one allocation, so reading them back is one copy
  Tensor loss, hit;  // (N) each: the two halves of `both`
};

// Labels (N values in [0, C)) as the float tensor kernels::class_loss takes, on `device`.
Tensor labels_tensor(const std::vector<int32_t>& labels, const Device& device);

class Loss {
 public:
  explicit Loss(kernels::LossKind kind) : kind_(kind) {}

  // output (N, C), labels (N) from labels_tensor(). Writes per-row results into
  // `rows`; when grad is given, d(sum of losses * grad_scale)/d(output) into it.
  void compute(const Tensor& output, const Tensor& labels, Tensor* grad, float grad_scale, LossRows& rows) const;
  // Adds the rows' loss sum, hits and count to stats (in row order; waits for the device).
  static void add_stats(const LossRows& rows, LossStats& stats);

  // Both steps at once, from host labels.
  void compute(const Tensor& output, const std::vector<int32_t>& labels, LossStats& stats, Tensor* grad,
               float grad_scale) const;

 private:
  kernels::LossKind kind_;
};

// The loss registry: each `loss` type, its keys and its builder. Adding a loss:
// its entry in losses.cpp's loss_types() (and its row formula in kernels).
struct LossType {
  std::string name;                  // "mse", Keras' name
  std::string doc;                   // one line for the README's table
  std::vector<config::KeyDoc> keys;  // beyond "type"
  std::function<std::unique_ptr<Loss>(const LossSpec&)> make;
};
const std::vector<LossType>& loss_types();
// The entry named `name`; ConfigError listing the valid names otherwise.
const LossType& loss_type(const std::string& name);

// The entry of `spec` (sparse_categorical_crossentropy for a spec made in code without a type).
const LossType& loss_type_of(const LossSpec& spec);

std::unique_ptr<Loss> make_loss(const LossSpec& spec);

}  // namespace dtrain::nn
