// The CUDA ops that are own kernels only: activations, batch normalization,
// dropout, element-wise arithmetic, class losses, optimizer updates and gradient
// clipping. Each checks shapes and launches bodies from bodies.h on the compute
// stream. Activations (not softmax), dropout and its multiply also take
// bfloat16 and float16 tensors (mixed precision; elements.h); the rest is float32.
#include <initializer_list>
#include <type_traits>

#include "core/check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elements.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/runtime.h"

namespace dtrain::kernels::cuda {

void activation_forward(Activation act, const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  if (act == Activation::kSoftmax) {  // float32 only, as in Keras' mixed precision
    const int64_t cols = x.dim(-1);
    launch(SoftmaxRowsBody{x.data(), y.data(), cols}, x.numel() / cols);
    return;
  }
  by_element_type({&x, &y}, [&](auto t) {
    using T = decltype(t);
    launch(ActivationForwardBody<T>{elements<T>(x), elements<T>(y), act}, x.numel());
  });
}

void activation_backward(Activation act, const Tensor& y, const Tensor& dy, Tensor& dx) {
  DT_CHECK_EQ(y.numel(), dy.numel());
  DT_CHECK_EQ(y.numel(), dx.numel());
  if (act == Activation::kSoftmax) {
    const int64_t cols = y.dim(-1);
    launch(SoftmaxBackwardRowsBody{y.data(), dy.data(), dx.data(), cols}, y.numel() / cols);
    return;
  }
  by_element_type({&y, &dy, &dx}, [&](auto t) {
    using T = decltype(t);
    launch(ActivationBackwardBody<T>{elements<T>(y), elements<T>(dy), elements<T>(dx), act}, y.numel());
  });
}

namespace {
// Per-channel tensors of batch norm have one value per channel (the last axis).
void check_channels(int64_t cols, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) DT_CHECK_EQ(t->numel(), cols);
}
}  // namespace

void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon, Tensor& y,
                                 Tensor& mean, Tensor& variance) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  check_channels(cols, {&gamma, &beta, &mean, &variance});
  DT_CHECK_EQ(y.numel(), x.numel());
  const float inv_rows = 1.0f / static_cast<float>(rows);
  column_sums(ElementValue{x.data(), cols}, rows, cols, inv_rows, mean.data());
  // Biased variance, as Keras normalises with it.
  column_sums(CenteredSquareValue{x.data(), mean.data(), cols}, rows, cols, inv_rows, variance.data());
  launch(BatchNormApplyBody{x.data(), y.data(), mean.data(), variance.data(), gamma.data(), beta.data(), epsilon, cols},
         x.numel());
}

void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                  const Tensor& variance, float epsilon, Tensor& y) {
  const int64_t cols = x.dim(-1);
  check_channels(cols, {&gamma, &beta, &mean, &variance});
  DT_CHECK_EQ(y.numel(), x.numel());
  launch(BatchNormApplyBody{x.data(), y.data(), mean.data(), variance.data(), gamma.data(), beta.data(), epsilon, cols},
         x.numel());
}

void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                         const Tensor& variance, float epsilon, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  check_channels(cols, {&gamma, &mean, &variance, &dgamma, &dbeta});
  DT_CHECK_EQ(dy.numel(), x.numel());
  DT_CHECK_EQ(dx.numel(), x.numel());
  Scratch dxc(static_cast<size_t>(cols) * sizeof(float));  // sum of dy * (x - mean) per channel
  column_sums(ElementValue{dy.data(), cols}, rows, cols, 1.0f, dbeta.data());
  column_sums(CenteredProductValue{dy.data(), x.data(), mean.data(), cols}, rows, cols, 1.0f, dxc.floats());
  launch(BatchNormGammaGradBody{dxc.floats(), variance.data(), epsilon, dgamma.data()}, cols);
  launch(BatchNormBackwardBody{x.data(), dy.data(), mean.data(), variance.data(), gamma.data(), dbeta.data(),
                               dxc.floats(), epsilon, cols, rows, dx.data()},
         x.numel());
}

void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask) {
  DT_CHECK_EQ(x.numel(), y.numel());
  DT_CHECK_EQ(x.numel(), mask.numel());
  DT_CHECK(rate >= 0.0f && rate < 1.0f, "dropout rate ", rate);
  by_element_type({&x, &y}, [&](auto t) {
    using T = decltype(t);
    launch(DropoutBody<T>{elements<T>(x), elements<T>(y), mask.data(), rate, seed}, x.numel());
  });
}

void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  DT_CHECK_EQ(a.numel(), b.numel());
  DT_CHECK_EQ(a.numel(), out.numel());
  by_element_type({&a, &out}, [&](auto t) {
    using T = decltype(t);
    launch(MultiplyBody<T>{elements<T>(a), b.data(), elements<T>(out)}, a.numel());
  });
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  launch(AxpyBody{alpha, x.data(), y.data()}, x.numel());
}

void divide(Tensor& x, float divisor) { launch(DivideBody{x.data(), divisor}, x.numel()); }

void flag_non_finite(const Tensor& x, Tensor& flag) { launch(NonFiniteFlagBody{x.data(), flag.data()}, x.numel()); }

void cast(const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  if (x.dtype() == y.dtype()) return y.copy_from(x);
  if (x.dtype() == DType::kF32)
    return by_element_type({&y}, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, float>) y.copy_from(x);  // (not reached: the dtypes differ)
      else launch(CastToBody<T>{x.data(), elements<T>(y)}, x.numel());
    });
  if (y.dtype() == DType::kF32)
    return by_element_type({&x}, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, float>) y.copy_from(x);
      else launch(CastFromBody<T>{elements<T>(x), y.data()}, x.numel());
    });
  throw ConfigError(str("cast from ", dtype_name(x.dtype()), " to ", dtype_name(y.dtype()), " on ", x.device().str(),
                        ": the CUDA backend converts between float32 and the 16-bit types only"));
}

void moving_average(Tensor& avg, const Tensor& x, float momentum) {
  DT_CHECK_EQ(avg.numel(), x.numel());
  launch(MovingAverageBody{avg.data(), x.data(), momentum}, x.numel());
}

void class_loss(LossKind kind, const Tensor& output, const Tensor& labels, float grad_scale, Tensor& row_loss,
                Tensor& row_hit, Tensor* grad) {
  const int64_t rows = output.dim(0), cols = rows ? output.numel() / rows : 0;
  DT_CHECK_EQ(labels.numel(), rows);
  DT_CHECK_EQ(row_loss.numel(), rows);
  DT_CHECK_EQ(row_hit.numel(), rows);
  if (grad) DT_CHECK_EQ(grad->numel(), output.numel());
  launch(ClassLossBody{kind, output.data(), labels.data(), cols, grad_scale, row_loss.data(), row_hit.data(),
                       grad ? grad->data() : nullptr},
         rows);
}

void sgd_update(Tensor& w, const Tensor& g, Tensor* velocity, const SgdCoeffs& k) {
  DT_CHECK_EQ(w.numel(), g.numel());
  DT_CHECK(k.momentum == 0.0f || (velocity && velocity->numel() == w.numel()),
           "sgd with momentum needs a velocity slot");
  launch(SgdBody{w.data(), g.data(), k.momentum == 0.0f ? nullptr : velocity->data(), k}, w.numel());
}

void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamCoeffs& k) {
  DT_CHECK_EQ(w.numel(), g.numel());
  DT_CHECK_EQ(w.numel(), m.numel());
  DT_CHECK_EQ(w.numel(), v.numel());
  launch(AdamBody{w.data(), g.data(), m.data(), v.data(), k}, w.numel());
}

void rmsprop_update(Tensor& w, const Tensor& g, Tensor& velocity, Tensor* momentum, Tensor* average_gradient,
                    const RmspropCoeffs& k) {
  launch(RmspropBody{w.data(), g.data(), velocity.data(), k.momentum > 0.0f ? momentum->data() : nullptr,
                     k.centered ? average_gradient->data() : nullptr, k},
         w.numel());
}

void adagrad_update(Tensor& w, const Tensor& g, Tensor& accumulator, const AdagradCoeffs& k) {
  launch(AdagradBody{w.data(), g.data(), accumulator.data(), k}, w.numel());
}

void sum_of_squares(const Tensor& x, Tensor& out) {
  DT_CHECK_EQ(out.numel(), 1);
  square_sum(x.data(), x.numel(), out.data());
}

void clip_by_norm(Tensor& x, const Tensor& squares, float clip_norm) {
  // The total is summed on the device and read there by every element: the
  // host never waits for the norm.
  Scratch total(sizeof(float));
  launch(SumBody{squares.data(), squares.numel(), total.floats()}, 1);
  launch(ClipByNormBody{x.data(), total.floats(), clip_norm}, x.numel());
}

void clip_by_value(Tensor& x, float limit) { launch(ClipByValueBody{x.data(), limit}, x.numel()); }

}  // namespace dtrain::kernels::cuda
