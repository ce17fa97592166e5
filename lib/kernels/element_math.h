// Per-element and per-row formulas shared by the CPU loops and the CUDA kernels,
// so both backends compute the same thing the same way: the class losses, the
// optimizer updates, gradient clipping and the point-wise activations. Plain
// inline functions marked DT_HOST_DEVICE; no CUDA header is needed to include
// this file.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"
#include "kernels/ops.h"

namespace dtrain::kernels::math {

constexpr float kProbabilityEpsilon = 1e-7f;  // Keras' backend epsilon for clipping probabilities

DT_HOST_DEVICE inline float activate(Activation act, float x) {
  switch (act) {
    case Activation::kRelu: return x > 0.0f ? x : 0.0f;
    case Activation::kSigmoid: return 1.0f / (1.0f + ::expf(-x));
    case Activation::kTanh: return ::tanhf(x);
    default: return x;  // linear (softmax is per row, not point-wise)
  }
}

// act'(x) * dy from the activation's output y.
DT_HOST_DEVICE inline float activation_grad(Activation act, float y, float dy) {
  switch (act) {
    case Activation::kRelu: return y > 0.0f ? dy : 0.0f;
    case Activation::kSigmoid: return dy * y * (1.0f - y);
    case Activation::kTanh: return dy * (1.0f - y * y);
    default: return dy;
  }
}

// The loss of one row of C outputs with label y; writes its gradient times `scale`
// into g when g is not null, and whether argmax(row) == y into *hit.
DT_HOST_DEVICE inline double class_row_loss(LossKind kind, const float* row, int64_t c, int32_t y, float* g,
                                            float scale, bool* hit) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; ++j)
    if (row[j] > row[best]) best = j;
  *hit = best == y;
  switch (kind) {
    case LossKind::kCrossEntropyLogits: {
      const float m = row[best];
      double sum = 0.0;
      for (int64_t j = 0; j < c; ++j) sum += ::exp(static_cast<double>(row[j] - m));
      const double log_sum = ::log(sum) + m;
      if (g)
        for (int64_t j = 0; j < c; ++j)
          g[j] = static_cast<float>((::exp(row[j] - log_sum) - (j == y ? 1.0 : 0.0)) * scale);
      return log_sum - row[y];
    }
    case LossKind::kCrossEntropyProbabilities: {
      const float r = row[y];
      const float p = r < kProbabilityEpsilon ? kProbabilityEpsilon
                                              : (r > 1.0f - kProbabilityEpsilon ? 1.0f - kProbabilityEpsilon : r);
      if (g) {
        for (int64_t j = 0; j < c; ++j) g[j] = 0.0f;
        // The clip has zero gradient outside its range, as in Keras.
        if (r > kProbabilityEpsilon && r < 1.0f - kProbabilityEpsilon) g[y] = -scale / p;
      }
      return -::log(static_cast<double>(p));
    }
    case LossKind::kMse: {
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

DT_HOST_DEVICE inline void sgd_element(float& w, float g, float& v, const SgdCoeffs& k) {
  if (k.momentum == 0.0f) {
    w -= k.lr * g;
    return;
  }
  v = k.momentum * v - k.lr * g;
  w += k.nesterov ? k.momentum * v - k.lr * g : v;
}

DT_HOST_DEVICE inline void adam_element(float& w, float g, float& m, float& v, const AdamCoeffs& k) {
  w -= k.decay * w;
  m = k.b1 * m + (1.0f - k.b1) * g;
  v = k.b2 * v + (1.0f - k.b2) * g * g;
  w -= k.alpha * m / (::sqrtf(v) + k.eps);
}

// Keras' RMSprop; `m` is used when k.momentum > 0, `a` when k.centered.
DT_HOST_DEVICE inline void rmsprop_element(float& w, float g, float& v, float& m, float& a, const RmspropCoeffs& k) {
  v = k.rho * v + (1.0f - k.rho) * g * g;
  float denominator = v + k.eps;
  if (k.centered) {
    a = k.rho * a + (1.0f - k.rho) * g;
    denominator = v - a * a + k.eps;
  }
  const float step = k.lr * g / ::sqrtf(denominator);
  if (k.momentum > 0.0f) {
    m = k.momentum * m + step;
    w -= m;
  } else {
    w -= step;
  }
}

DT_HOST_DEVICE inline void adagrad_element(float& w, float g, float& a, const AdagradCoeffs& k) {
  a += g * g;
  w -= k.lr * g / ::sqrtf(a + k.eps);
}

// Keras' clip_by_norm of one element: x * clip / max(norm, clip). A NaN norm
// fails `norm <= clip` and gives NaN (TF's maximum propagates NaN too).
DT_HOST_DEVICE inline float clip_by_norm_element(float x, float norm, float clip) {
  return x * clip / (norm <= clip ? clip : norm);
}

// min(max(x, -limit), limit), written so that NaN stays NaN.
DT_HOST_DEVICE inline float clip_by_value_element(float x, float limit) {
  return x < -limit ? -limit : (x > limit ? limit : x);
}

}  // namespace dtrain::kernels::math
