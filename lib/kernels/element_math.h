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
constexpr float kSqrtHalf = 0.70710678118654752f;       // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;     // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;    // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// gelu(x) = x * Phi(x) (Keras' approximate=False), or Hendrycks' tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
DT_HOST_DEVICE inline float gelu(float x, bool approximate) {
  if (!approximate) return 0.5f * x * (1.0f + ::erff(x * kSqrtHalf));
  return 0.5f * x * (1.0f + ::tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

// d gelu(x) / dx.
DT_HOST_DEVICE inline float gelu_grad(float x, bool approximate) {
  if (!approximate) return 0.5f * (1.0f + ::erff(x * kSqrtHalf)) + x * kInvSqrt2Pi * ::expf(-0.5f * x * x);
  const float t = ::tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

DT_HOST_DEVICE inline float activate(Activation act, float x) {
  switch (act) {
    case Activation::kRelu: return x > 0.0f ? x : 0.0f;
    case Activation::kSigmoid: return 1.0f / (1.0f + ::expf(-x));
    case Activation::kTanh: return ::tanhf(x);
    case Activation::kGelu: return gelu(x, false);
    case Activation::kGeluTanh: return gelu(x, true);
    default: return x;  // linear (softmax is per row, not point-wise)
  }
}

// Layer normalization of one row of d values (gamma / beta may be null):
// y = (x - mean) * rstd * gamma + beta; writes the row's mean and rstd.
DT_HOST_DEVICE inline void layer_norm_row(const float* x, const float* gamma, const float* beta, float epsilon,
                                          int64_t d, float* y, float* mean, float* rstd) {
  double sum = 0.0, squares = 0.0;
  for (int64_t j = 0; j < d; ++j) sum += x[j];
  const double m = sum / static_cast<double>(d);
  for (int64_t j = 0; j < d; ++j) squares += (x[j] - m) * (x[j] - m);
  const float s = static_cast<float>(1.0 / ::sqrt(squares / static_cast<double>(d) + epsilon));
  const auto mf = static_cast<float>(m);
  for (int64_t j = 0; j < d; ++j) y[j] = (x[j] - mf) * s * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
  *mean = mf;
  *rstd = s;
}

// The input gradient of one layer-normalised row:
// dx = rstd * (dh - mean(dh) - h * mean(dh * h)), dh = dy * gamma, h the normalised x.
DT_HOST_DEVICE inline void layer_norm_grad_row(const float* x, const float* dy, const float* gamma, float mean,
                                               float rstd, int64_t d, float* dx) {
  double sum_dh = 0.0, sum_dh_h = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    const float dh = dy[j] * (gamma ? gamma[j] : 1.0f);
    sum_dh += dh;
    sum_dh_h += dh * (x[j] - mean) * rstd;
  }
  const auto mean_dh = static_cast<float>(sum_dh / static_cast<double>(d));
  const auto mean_dh_h = static_cast<float>(sum_dh_h / static_cast<double>(d));
  for (int64_t j = 0; j < d; ++j) {
    const float dh = dy[j] * (gamma ? gamma[j] : 1.0f);
    dx[j] = rstd * (dh - mean_dh - (x[j] - mean) * rstd * mean_dh_h);
  }
}

// act'(x) * dy from the activation's input x.
DT_HOST_DEVICE inline float activation_grad_from_input(Activation act, float x, float dy) {
  switch (act) {
    case Activation::kRelu: return x > 0.0f ? dy : 0.0f;
    case Activation::kSigmoid: {
      const float s = 1.0f / (1.0f + ::expf(-x));
      return dy * s * (1.0f - s);
    }
    case Activation::kTanh: {
      const float t = ::tanhf(x);
      return dy * (1.0f - t * t);
    }
    case Activation::kGelu: return dy * gelu_grad(x, false);
    case Activation::kGeluTanh: return dy * gelu_grad(x, true);
    default: return dy;
  }
}

// act'(x) * dy from the activation's output y (not gelu: grad_from_input).
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
