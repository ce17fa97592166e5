// Implementation of losses.h: the row formulas are kernels::class_loss (shared
// by the CPU and GPU backends); the sums are taken here in row order, so the
// result does not depend on the thread count.
#include "nn/losses.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::nn {

Tensor labels_tensor(const std::vector<int32_t>& labels, const Device& device) {
  Tensor host({static_cast<int64_t>(labels.size())});
  float* p = host.data();
  for (size_t i = 0; i < labels.size(); ++i) p[i] = static_cast<float>(labels[i]);  // exact below 2^24
  return host.to(device);
}

void Loss::compute(const Tensor& output, const Tensor& labels, Tensor* grad, float grad_scale, LossRows& rows) const {
  DT_CHECK_EQ(output.rank(), 2);
  const int64_t n = output.dim(0);
  DT_CHECK_EQ(labels.numel(), n);
  if (grad) DT_CHECK(grad->shape() == output.shape(), "loss grad shape");
  if (!rows.both.defined() || rows.both.numel() != 2 * n || rows.both.device() != output.device()) {
    rows.both = Tensor({2 * n}, output.device());
    rows.loss = rows.both.flat_slice(0, n);
    rows.hit = rows.both.flat_slice(n, n);
  }
  kernels::class_loss(kind_, output, labels, grad_scale, rows.loss, rows.hit, grad);
}

void Loss::add_stats(const LossRows& rows, LossStats& stats) {
  const Tensor both = rows.both.to_host();  // one copy (and on a GPU one wait) for both halves
  const int64_t n = both.numel() / 2;
  const float* loss = both.data();
  const float* hit = both.data() + n;
  for (int64_t i = 0; i < n; ++i) {
    stats.loss_sum += loss[i];
    stats.correct += hit[i] > 0.5f;
  }
  stats.count += n;
}

void Loss::compute(const Tensor& output, const std::vector<int32_t>& labels, LossStats& stats, Tensor* grad,
                   float grad_scale) const {
  DT_CHECK_EQ(static_cast<int64_t>(labels.size()), output.dim(0));
  LossRows rows;
  compute(output, labels_tensor(labels, output.device()), grad, grad_scale, rows);
  add_stats(rows, stats);
}

std::unique_ptr<Loss> make_loss(const config::LossSpec& spec) {
  using kernels::LossKind;
  if (spec.type == "sparse_categorical_crossentropy" || spec.type == "categorical_crossentropy")
    return std::make_unique<Loss>(spec.from_logits ? LossKind::kCrossEntropyLogits
                                                   : LossKind::kCrossEntropyProbabilities);
  if (spec.type == "mse") return std::make_unique<Loss>(LossKind::kMse);
  throw ConfigError(str(spec.path, ".type: unknown loss '", spec.type,
                        "'; valid losses: sparse_categorical_crossentropy, categorical_crossentropy, mse"));
}

}  // namespace dtrain::nn
