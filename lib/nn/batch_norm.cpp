// BatchNormalization over the channels axis, with Keras' moving statistics:
// moving = momentum * moving + (1 - momentum) * batch (biased batch variance, as in Keras 3).
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include <limits>

#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"

namespace dtrain::nn {

BatchNormalization::BatchNormalization(const std::string& name, const Shape& input,
                                       float momentum, float epsilon, bool center, bool scale)
    : Layer(name, "BatchNormalization", input, input),
      momentum_(momentum),
      epsilon_(epsilon),
      center_(center),
      scale_(scale) {
  const int64_t c = input.back();
  // Without scale/center, gamma/beta stay constant 1/0 and are not params.
  gamma_ = {name + "/gamma", Tensor({c}), scale ? Tensor({c}) : Tensor()};
  beta_ = {name + "/beta", Tensor({c}), center ? Tensor({c}) : Tensor()};
  moving_mean_ = {name + "/moving_mean", Tensor({c}), Tensor()};
  moving_variance_ = {name + "/moving_variance", Tensor({c}), Tensor()};
  batch_mean_ = Tensor({c});
  batch_variance_ = Tensor({c});
  dgamma_scratch_ = Tensor({c});
  dbeta_scratch_ = Tensor({c});
  gamma_.value.fill(1.0f);
  moving_variance_.value.fill(1.0f);
}

LayerBuffers BatchNormalization::buffers(int64_t rows, DType dtype, bool) const {
  return {output_bytes(rows, dtype), input_bytes(rows, dtype)};
}

std::vector<Param*> BatchNormalization::params() {
  std::vector<Param*> out;
  if (scale_) out.push_back(&gamma_);
  if (center_) out.push_back(&beta_);
  out.push_back(&moving_mean_);
  out.push_back(&moving_variance_);
  return out;
}

void BatchNormalization::initialize(Rng& rng) {
  gamma_.value.fill(1.0f);
  beta_.value.zero();
  moving_mean_.value.zero();
  moving_variance_.value.fill(1.0f);
}

void BatchNormalization::move_extras(const Device& device) {
  for (Tensor* t : {&batch_mean_, &batch_variance_, &dgamma_scratch_, &dbeta_scratch_}) *t = t->to(device);
  // Without scale/center, gamma/beta are constants rather than params.
  if (!scale_) gamma_.value = gamma_.value.to(device);
  if (!center_) beta_.value = beta_.value.to(device);
}

Tensor BatchNormalization::forward(const Tensor& x, const StepContext& ctx) {
  Tensor& y = reuse(y_, x.dim(0), output_shape());
  if (!ctx.training) {
    kernels::batch_norm_forward_inference(x, gamma_.value, beta_.value, moving_mean_.value,
                                          moving_variance_.value, epsilon_, y);
    return y;
  }
  x_ = x;
  kernels::batch_norm_forward_training(x, gamma_.value, beta_.value, epsilon_, y, batch_mean_,
                                       batch_variance_);
  kernels::moving_average(moving_mean_.value, batch_mean_, momentum_);
  kernels::moving_average(moving_variance_.value, batch_variance_, momentum_);
  return y;
}

Tensor BatchNormalization::backward(const Tensor& dy, bool need_dx) {
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  Tensor& dgamma = scale_ ? gamma_.grad : dgamma_scratch_;
  Tensor& dbeta = center_ ? beta_.grad : dbeta_scratch_;
  kernels::batch_norm_backward(x_, dy, gamma_.value, batch_mean_, batch_variance_, epsilon_, dx,
                               dgamma, dbeta);
  if (!need_dx) return {};
  return dx;
}

// The registry entry (layer_registry.h): keys, reader, builder.
const LayerType& batch_normalization_layer_type() {
  static const LayerType type{
      "BatchNormalization",
      "normalises over the channels (last) axis; moving statistics for evaluation",
      {{"momentum", "0.99, in [0, 1)"},
       {"epsilon", "0.001, > 0"},
       {"center", "true"},
       {"scale", "true"},
       {"axis", "-1 only (channels last)"}},
      [](config::Section& r) {
        auto o = std::make_shared<BatchNormalizationOptions>();
        o->momentum = r.get_double("momentum", o->momentum, config::kFraction);
        o->epsilon = r.get_double("epsilon", o->epsilon, config::kPositive);
        o->center = r.get_bool("center", o->center);
        o->scale = r.get_bool("scale", o->scale);
        if (const auto axis = r.find("axis")) {
          if (!axis->is_integer()) axis->fail(str("expected -1 (the channels axis), got ", axis->describe()));
          if (axis->to_int(std::numeric_limits<int64_t>::min()) != -1)
            axis->fail(str("only the channels axis -1 is supported (dtrain's tensors are channels-last), got ",
                           axis->show(), "; remove 'axis' or set it to -1"));
        }
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<BatchNormalizationOptions>();
        return std::make_unique<BatchNormalization>(ctx.name, input, static_cast<float>(o.momentum),
                                                    static_cast<float>(o.epsilon), o.center, o.scale);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
