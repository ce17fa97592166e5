// Pool2D: MaxPooling2D, AveragePooling2D and GlobalAveragePooling2D on kernels::pool2d_*.
// GlobalAveragePooling2D is an average pool whose window is the whole image; its
// output (1, 1, C) per sample is presented as (C).
#include "nn/layers.h"

namespace dtrain::nn {
namespace {

// The 4-D view oneDNN pools over: (N, H, W, C) for the layer's output shape,
// which is (C) for global pooling.
Shape pooled_4d(int64_t n, const Shape& out) {
  return out.size() == 1 ? Shape{n, 1, 1, out[0]} : with_batch(n, out);
}

}  // namespace

Pool2D::Pool2D(const std::string& name, const std::string& type, const Shape& input,
               const Shape& output, const kernels::Pool2DParams& p)
    : Layer(name, type, input, output), p_(p) {}

Tensor Pool2D::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  Tensor& y = reuse(y_, n, output_shape());
  Tensor y4 = y.reshaped(pooled_4d(n, output_shape()));
  kernels::pool2d_forward(x, p_, y4, ctx.training ? &ws_ : nullptr);
  return y;
}

Tensor Pool2D::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  const int64_t n = dy.dim(0);
  Tensor& dx = reuse(dx_, n, input_shape());
  kernels::pool2d_backward(dy.reshaped(pooled_4d(n, output_shape())), p_, &ws_, dx);
  return dx;
}

}  // namespace dtrain::nn
