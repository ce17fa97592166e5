// Losses over class labels: sparse/categorical cross-entropy (from logits or from
// probabilities) and mean squared error against one-hot targets.
//
// Integer labels serve all three (categorical targets are the labels' one-hot
// form). The output is (N, C), or (N, ..., C) with a label per position (a
// sequence model's (N, T, C) logits and (N, T) next tokens): every position is a
// row of the formula, and a sample's loss is the mean over its positions, as
// Keras' losses take it. The gradient is that of the mean over the batch, scaled
// by grad_scale (1/N for a plain batch; the strategy may pass 1/global_batch):
// per sample, so a sequence's positions share it. The per-row work is
// kernels::class_loss on the output's device.
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
  double loss_sum = 0.0;  // sum of per-position losses (one position per sample for class labels)
  int64_t correct = 0;    // positions whose argmax equals the label
  int64_t count = 0;      // samples seen
  int64_t tokens = 0;     // label positions seen: count x the labels per sample (a sequence's T)
  // Adds another batch's (or replica's, or work unit's) sums.
  void add(const LossStats& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
    tokens += other.tokens;
  }
};

// Per-row results of a loss, on the output's device, read later by add_stats()
// (so a GPU step need not wait for them before its backward pass is issued).
struct LossRows {
  Tensor both;       // (2R): one allocation, so reading them back is one copy
  Tensor loss, hit;  // (R) each, one value per label position: the two halves of `both`
  int64_t samples = 0;  // N: the output's first dimension (R = N x positions per sample)
};

// Labels (values in [0, C), one per label position) as the float tensor
// kernels::class_loss takes, on `device`.
Tensor labels_tensor(const std::vector<int32_t>& labels, const Device& device);

class Loss {
 public:
  explicit Loss(kernels::LossKind kind) : kind_(kind) {}

  // output (N, C) or (N, ..., C), labels (R = numel / C, sample by sample) from
  // labels_tensor(). Writes per-position results into `rows`; when grad is given,
  // d(sum over samples of the sample's mean loss * grad_scale)/d(output) into it
  // (with P positions per sample: each position's row gradient * grad_scale / P).
  void compute(const Tensor& output, const Tensor& labels, Tensor* grad, float grad_scale, LossRows& rows) const;
  // Adds the rows' loss sum, hits, samples and positions to stats (in row order;
  // waits for the device).
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
  // A cross-entropy over class scores: from logits, a tensor-parallel output layer
  // may keep its logits split by class (the vocabulary-parallel loss takes them).
  bool cross_entropy = false;
};
const std::vector<LossType>& loss_types();
// The entry named `name`; ConfigError listing the valid names otherwise.
const LossType& loss_type(const std::string& name);

// The entry of `spec` (sparse_categorical_crossentropy for a spec made in code without a type).
const LossType& loss_type_of(const LossSpec& spec);

std::unique_ptr<Loss> make_loss(const LossSpec& spec);

// Keras' warning for a loss with from_logits true whose model ends in a softmax
// (a last Dense, Conv2D, Residual or Activation layer with activation softmax):
// the loss is then given probabilities, not logits. Its text, or "" when the
// pair is fine.
std::string softmax_logits_warning(const ModelSpec& model, const LossSpec& loss);

}  // namespace dtrain::nn
