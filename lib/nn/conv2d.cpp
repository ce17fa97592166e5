// Conv2D: a 2-D convolution on kernels::conv2d_* (oneDNN), with fused activation
// for relu/sigmoid/tanh and a separate softmax over channels otherwise.
#include "nn/layers.h"

namespace dtrain::nn {

Conv2D::Conv2D(const std::string& name, const Shape& input, const Shape& output, int64_t kh,
               int64_t kw, const kernels::Conv2DParams& p, Activation act, bool use_bias)
    : Layer(name, "Conv2D", input, output), p_(p), act_(act), use_bias_(use_bias) {
  const Shape kshape = {kh, kw, input[2], output[2]};
  kernel_ = {name + "/kernel", Tensor(kshape), Tensor(kshape)};
  if (use_bias_) bias_ = {name + "/bias", Tensor({output[2]}), Tensor({output[2]})};
}

std::vector<Param*> Conv2D::params() {
  if (use_bias_) return {&kernel_, &bias_};
  return {&kernel_};
}

void Conv2D::initialize(Rng& rng) {
  const Shape& k = kernel_.value.shape();
  const int64_t receptive = k[0] * k[1];
  glorot_uniform(kernel_.value, receptive * k[2], receptive * k[3], rng);
  if (use_bias_) bias_.value.zero();
}

Tensor Conv2D::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  x_ = x;
  Tensor& y = reuse(y_, n, output_shape());
  const Tensor* bias = use_bias_ ? &bias_.value : nullptr;
  if (act_ == Activation::kSoftmax) {
    kernels::conv2d_forward(x, kernel_.value, bias, p_, Activation::kLinear, y);
    kernels::activation_forward(Activation::kSoftmax, y, y);
  } else {
    kernels::conv2d_forward(x, kernel_.value, bias, p_, act_, y);
  }
  return y;
}

Tensor Conv2D::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0);
  const Tensor dpre = before_activation(act_, y_, dy, dpre_);
  kernels::conv2d_backward_weights(x_, dpre, p_, kernel_.grad, use_bias_ ? &bias_.grad : nullptr);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  kernels::conv2d_backward_data(dpre, kernel_.value, p_, dx);
  return dx;
}

}  // namespace dtrain::nn
