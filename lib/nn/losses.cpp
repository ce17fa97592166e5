// Implementation of losses.h. Own loops: oneDNN has no loss primitives.
// Per-sample work is independent, so rows are computed in parallel and summed
// afterwards in row order (the result does not depend on the thread count).
#include "nn/losses.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::nn {
namespace {

constexpr float kEpsilon = 1e-7f;  // Keras' backend epsilon for clipping probabilities

int64_t argmax(const float* row, int64_t c) {
  return std::max_element(row, row + c) - row;
}

enum class Kind { kCrossEntropyLogits, kCrossEntropyProbabilities, kMse };

class ClassLoss : public Loss {
 public:
  explicit ClassLoss(Kind kind) : kind_(kind) {}

  void compute(const Tensor& output, const std::vector<int32_t>& labels, LossStats& stats,
               Tensor* grad, float grad_scale) const override {
    DT_CHECK_EQ(output.rank(), 2);
    const int64_t n = output.dim(0), c = output.dim(1);
    DT_CHECK_EQ(static_cast<int64_t>(labels.size()), n);
    if (grad) DT_CHECK(grad->shape() == output.shape(), "loss grad shape");
    std::vector<double> losses(n);
    std::vector<char> hits(n);
    const float* out = output.data();
    float* g = grad ? grad->data() : nullptr;
#pragma omp parallel for schedule(static) if (n * c > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float* row = out + i * c;
      const int32_t y = labels[i];
      hits[i] = argmax(row, c) == y;
      losses[i] = row_loss(row, c, y, g ? g + i * c : nullptr, grad_scale);
    }
    for (int64_t i = 0; i < n; ++i) {
      stats.loss_sum += losses[i];
      stats.correct += hits[i];
    }
    stats.count += n;
  }

 private:
  // Loss of one row; writes its gradient (times scale) when g is given.
  double row_loss(const float* row, int64_t c, int32_t y, float* g, float scale) const {
    switch (kind_) {
      case Kind::kCrossEntropyLogits: {
        const float m = *std::max_element(row, row + c);
        double sum = 0.0;
        for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(row[j] - m));
        const double log_sum = std::log(sum) + m;
        if (g)
          for (int64_t j = 0; j < c; ++j)
            g[j] = static_cast<float>((std::exp(row[j] - log_sum) - (j == y ? 1.0 : 0.0)) * scale);
        return log_sum - row[y];
      }
      case Kind::kCrossEntropyProbabilities: {
        const float p = std::clamp(row[y], kEpsilon, 1.0f - kEpsilon);
        if (g) {
          std::fill(g, g + c, 0.0f);
          // The clip has zero gradient outside its range, as in Keras.
          if (row[y] > kEpsilon && row[y] < 1.0f - kEpsilon) g[y] = -scale / p;
        }
        return -std::log(static_cast<double>(p));
      }
      case Kind::kMse: {
        double sum = 0.0;
        for (int64_t j = 0; j < c; ++j) {
          const double d = row[j] - (j == y ? 1.0 : 0.0);
          sum += d * d;
          if (g) g[j] = static_cast<float>(2.0 * d / c * scale);
        }
        return sum / c;
      }
    }
    return 0.0;
  }

  Kind kind_;
};

}  // namespace

std::unique_ptr<Loss> make_loss(const config::LossSpec& spec) {
  if (spec.type == "sparse_categorical_crossentropy" || spec.type == "categorical_crossentropy")
    return std::make_unique<ClassLoss>(spec.from_logits ? Kind::kCrossEntropyLogits
                                                        : Kind::kCrossEntropyProbabilities);
  if (spec.type == "mse") return std::make_unique<ClassLoss>(Kind::kMse);
  throw ConfigError(str(spec.path, ".type: unknown loss '", spec.type,
                        "'; valid losses: sparse_categorical_crossentropy, categorical_crossentropy, mse"));
}

}  // namespace dtrain::nn
