// Dense: a fully connected layer on kernels::dense_* (oneDNN matmul).
// relu/sigmoid/tanh are fused into the matmul; softmax runs after it.
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"

namespace dtrain::nn {

Dense::Dense(const std::string& name, int64_t in, int64_t units, Activation act, bool use_bias)
    : Layer(name, "Dense", {in}, {units}), act_(act), use_bias_(use_bias) {
  kernel_ = {name + "/kernel", Tensor({in, units}), Tensor({in, units})};
  if (use_bias_) bias_ = {name + "/bias", Tensor({units}), Tensor({units})};
}

std::vector<Param*> Dense::params() {
  if (use_bias_) return {&kernel_, &bias_};
  return {&kernel_};
}

// bfloat16 too, and float16 on a GPU (the CPU backend has no float16 kernels);
// float32 with a softmax activation, as in Keras' mixed precision.
bool Dense::supports_dtype(DType dtype) const {
  if (dtype == DType::kF32) return true;
  return act_ != Activation::kSoftmax && (dtype == DType::kBF16 || !device().is_cpu());
}

void Dense::refresh_compute_weights() { refresh_copy(kernel_, kernel_copy_); }

LayerBuffers Dense::buffers(int64_t rows, DType dtype, bool need_dx) const {
  const int64_t out = output_bytes(rows, dtype);
  return {out, (need_dx ? input_bytes(rows, dtype) : 0) + (act_ != Activation::kLinear ? out : 0)};
}

int64_t Dense::weight_copy_bytes(DType dtype) const {
  return dtype == DType::kF32 ? 0 : kernel_.value.numel() * static_cast<int64_t>(dtype_size(dtype));
}

void Dense::initialize(Rng& rng) {
  glorot_uniform(kernel_.value, kernel_.value.dim(0), kernel_.value.dim(1), rng);
  if (use_bias_) bias_.value.zero();
}

Tensor Dense::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  x_ = x;
  Tensor& y = reuse(y_, n, output_shape());
  const Tensor* bias = use_bias_ ? &bias_.value : nullptr;
  if (act_ == Activation::kSoftmax) {
    kernels::dense_forward(x, kernel_.value, bias, Activation::kLinear, y);  // float32 only
    kernels::activation_forward(Activation::kSoftmax, y, y);
  } else {
    kernels::dense_forward(x, compute_weights(kernel_, kernel_copy_), bias, act_, y);
  }
  return y;
}

Tensor Dense::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0);
  const Tensor dpre = before_activation(act_, y_, dy, dpre_);
  kernels::dense_backward_weights(x_, dpre, kernel_.grad, use_bias_ ? &bias_.grad : nullptr);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  kernels::dense_backward_data(dpre, compute_weights(kernel_, kernel_copy_), dx);
  return dx;
}

// The registry entry (layer_registry.h): keys, reader, builder.
const LayerType& dense_layer_type() {
  static const LayerType type{
      "Dense",
      "a fully connected layer, `activation(x . kernel + bias)`",
      {{"units", "output features (required, >= 1)"},
       {"activation", "`linear` (default), `relu`, `sigmoid`, `tanh`, `softmax`"},
       {"use_bias", "true"}},
      [](config::Section& r) {
        auto o = std::make_shared<DenseOptions>();
        o->units = r.require_int("units", 1);
        o->activation = get_activation(r, "activation", o->activation);
        o->use_bias = r.get_bool("use_bias", o->use_bias);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<DenseOptions>();
        if (input.size() != 1)
          throw ConfigError(str(layer_where(spec, ctx.name), ": expects a flat input (features,), got ",
                                shape_str(input), "; add {\"type\": \"Flatten\"} before it"));
        return std::make_unique<Dense>(ctx.name, input[0], o.units, o.activation, o.use_bias);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
