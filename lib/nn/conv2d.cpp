// Conv2D: a 2-D convolution on kernels::conv2d_* (oneDNN), with fused activation
// for relu/sigmoid/tanh and a separate softmax over channels otherwise.
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
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

// bfloat16 too, and float16 on a GPU (the CPU backend has no float16 kernels);
// float32 with a softmax activation, as in Keras' mixed precision.
bool Conv2D::supports_dtype(DType dtype) const {
  if (dtype == DType::kF32) return true;
  return act_ != Activation::kSoftmax && (dtype == DType::kBF16 || !device().is_cpu());
}

void Conv2D::refresh_compute_weights() { refresh_copy(kernel_, kernel_copy_); }

LayerBuffers Conv2D::buffers(int64_t rows, DType dtype, bool need_dx) const {
  const int64_t out = output_bytes(rows, dtype);
  return {out, (need_dx ? input_bytes(rows, dtype) : 0) + (act_ != Activation::kLinear ? out : 0)};
}

int64_t Conv2D::weight_copy_bytes(DType dtype) const {
  return dtype == DType::kF32 ? 0 : kernel_.value.numel() * static_cast<int64_t>(dtype_size(dtype));
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
    kernels::conv2d_forward(x, kernel_.value, bias, p_, Activation::kLinear, y);  // float32 only
    kernels::activation_forward(Activation::kSoftmax, y, y);
  } else {
    kernels::conv2d_forward(x, compute_weights(kernel_, kernel_copy_), bias, p_, act_, y);
  }
  return y;
}

Tensor Conv2D::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0);
  const Tensor dpre = before_activation(act_, y_, dy, dpre_);
  kernels::conv2d_backward_weights(x_, dpre, p_, kernel_.grad, use_bias_ ? &bias_.grad : nullptr);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  kernels::conv2d_backward_data(dpre, compute_weights(kernel_, kernel_copy_), p_, dx);
  return dx;
}

// The registry entry (layer_registry.h): keys, reader, builder.
const LayerType& conv2d_layer_type() {
  static const LayerType type{
      "Conv2D",
      "a 2-D convolution over NHWC images, kernel `(kh, kw, in, filters)`",
      {{"filters", "output channels (required, >= 1)"},
       {"kernel_size", "an int or `[h, w]` (required)"},
       {"strides", "an int or `[h, w]` (1)"},
       {"padding", "`valid` (default) or `same`"},
       {"activation", "`linear` (default), `relu`, `sigmoid`, `tanh`, `softmax`"},
       {"use_bias", "true"}},
      [](config::Section& r) {
        auto o = std::make_shared<Conv2DOptions>();
        o->filters = r.require_int("filters", 1);
        r.require("kernel_size", " (a positive integer or [height, width])").to_pair(o->kernel_size);
        r.get_pair("strides", o->strides);
        o->same_padding = r.get_choice("padding", "valid", {"valid", "same"}, "padding") == "same";
        o->activation = get_fused_activation(r, "activation", o->activation);
        o->use_bias = r.get_bool("use_bias", o->use_bias);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<Conv2DOptions>();
        require_image(spec, ctx.name, input);
        AxisPlan a[2];
        plan_window(spec, ctx.name, input, o.kernel_size, o.strides, o.same_padding, "kernel", a);
        kernels::Conv2DParams p;
        for (int i = 0; i < 2; ++i) {
          p.stride[i] = o.strides[i];
          p.pad_before[i] = a[i].pad_before;
          p.pad_after[i] = a[i].pad_after;
        }
        return std::make_unique<Conv2D>(ctx.name, input, Shape{a[0].out, a[1].out, o.filters}, o.kernel_size[0],
                                        o.kernel_size[1], p, o.activation, o.use_bias);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
