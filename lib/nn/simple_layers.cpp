// Flatten, Dropout and Activation: layers without trainable params.
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"

namespace dtrain::nn {

Flatten::Flatten(const std::string& name, const Shape& input)
    : Layer(name, "Flatten", input, {shape_numel(input)}) {}

Tensor Flatten::forward(const Tensor& x, const StepContext& ctx) {
  return x.reshaped(with_batch(x.dim(0), output_shape()));
}

Tensor Flatten::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  return dy.reshaped(with_batch(dy.dim(0), input_shape()));
}

Dropout::Dropout(const std::string& name, const Shape& input, float rate, uint64_t layer_index)
    : Layer(name, "Dropout", input, input), rate_(rate), layer_index_(layer_index) {}

Tensor Dropout::forward(const Tensor& x, const StepContext& ctx) {
  applied_ = ctx.training && rate_ > 0.0f;
  if (!applied_) return x;  // identity at inference, as in Keras
  const int64_t n = x.dim(0);
  Tensor& y = reuse(y_, n, output_shape());
  Tensor& mask = reuse(mask_, n, output_shape(), DType::kF32);
  const uint64_t seed = hash_u64(ctx.seed, 0x64726f70ull /* "drop" */, layer_index_,
                                 static_cast<uint64_t>(ctx.step));
  kernels::dropout_forward(x, rate_, seed, y, mask);
  return y;
}

LayerBuffers Dropout::buffers(int64_t rows, DType dtype, bool need_dx) const {
  if (rate_ <= 0.0f) return {};
  return {output_bytes(rows, dtype) + output_bytes(rows, DType::kF32), need_dx ? input_bytes(rows, dtype) : 0};
}

Tensor Dropout::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  if (!applied_) return dy;
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  kernels::multiply(dy, mask_, dx);
  return dx;
}

ActivationLayer::ActivationLayer(const std::string& name, const Shape& input, Activation act)
    : Layer(name, "Activation", input, input), act_(act) {}

Tensor ActivationLayer::forward(const Tensor& x, const StepContext& ctx) {
  Tensor& y = reuse(y_, x.dim(0), output_shape());
  kernels::activation_forward(act_, x, y);
  if (kernels::grad_from_input(act_)) x_ = x;  // gelu's gradient needs its input
  return y;
}

Tensor ActivationLayer::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  if (kernels::grad_from_input(act_)) kernels::activation_backward_from_input(act_, x_, dy, dx);
  else kernels::activation_backward(act_, y_, dy, dx);
  return dx;
}

Tensor ActivationLayer::decode(const Tensor& x, int64_t) {
  Tensor y(x.shape(), x.device());
  kernels::activation_forward(act_, x, y);
  return y;
}

// The registry entries (layer_registry.h) of Flatten, Dropout and Activation.
const LayerType& flatten_layer_type() {
  static const LayerType type{
      "Flatten", "`(h, w, c)` -> `(h * w * c)`", {},
      [](config::Section&) { return std::make_shared<LayerOptions>(); },
      [](const LayerSpec&, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        return std::make_unique<Flatten>(ctx.name, input);
      },
      nullptr};
  return type;
}

const LayerType& dropout_layer_type() {
  static const LayerType type{
      "Dropout", "inverted dropout while training, the identity at evaluation",
      {{"rate", "the share of inputs dropped (required, in [0, 1))"}},
      [](config::Section& r) {
        auto o = std::make_shared<DropoutOptions>();
        o->rate = r.require_double("rate", config::kFraction);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        return std::make_unique<Dropout>(ctx.name, input, static_cast<float>(spec.options_as<DropoutOptions>().rate),
                                         ctx.layer_index);
      },
      nullptr};
  return type;
}

const LayerType& activation_layer_type() {
  static const LayerType type{
      "Activation", "an activation on its own",
      {{"activation", "`relu`, `sigmoid`, `tanh`, `softmax` or `linear` (required)"}},
      [](config::Section& r) {
        auto o = std::make_shared<ActivationOptions>();
        o->activation = read_activation(r.require("activation", str(" (one of ", join(activation_names(), ", "), ")")));
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        return std::make_unique<ActivationLayer>(ctx.name, input, spec.options_as<ActivationOptions>().activation);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
