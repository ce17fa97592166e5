// LayerNormalization: each position normalised over its last axis (Keras'
// axis -1), on kernels::layer_norm_*; gamma starts at ones, beta at zeros.
// Its registry entry (layer_registry.h) closes the file.
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/sequence_layers.h"

namespace dtrain::nn {

LayerNormalization::LayerNormalization(const std::string& name, const Shape& input, float epsilon, bool center,
                                       bool scale)
    : Layer(name, "LayerNormalization", input, input), epsilon_(epsilon), center_(center), scale_(scale) {
  const int64_t d = input.back();
  if (scale_) gamma_ = {name + "/gamma", Tensor({d}), Tensor({d})};
  if (center_) beta_ = {name + "/beta", Tensor({d}), Tensor({d})};
}

std::vector<Param*> LayerNormalization::params() {
  std::vector<Param*> out;
  if (scale_) out.push_back(&gamma_);
  if (center_) out.push_back(&beta_);
  return out;
}

void LayerNormalization::initialize(Rng& rng) {
  if (scale_) gamma_.value.fill(1.0f);
  if (center_) beta_.value.zero();
}

LayerBuffers LayerNormalization::buffers(int64_t rows, DType dtype, bool need_dx) const {
  // y, and the mean and 1/std of each position; dx, computed even when not passed on.
  const int64_t statistics = output_bytes(rows, DType::kF32) / input_shape().back();  // one float per position
  return {output_bytes(rows, DType::kF32) + 2 * statistics, input_bytes(rows, DType::kF32)};
}

Tensor LayerNormalization::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  x_ = x;
  Tensor& y = reuse(y_, n, output_shape());
  Shape positions = output_shape();
  positions.pop_back();
  reuse(mean_, n, positions);
  reuse(rstd_, n, positions);
  kernels::layer_norm_forward(x, scale_ ? &gamma_.value : nullptr, center_ ? &beta_.value : nullptr, epsilon_, y,
                              mean_, rstd_);
  return y;
}

Tensor LayerNormalization::backward(const Tensor& dy, bool need_dx) {
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  kernels::layer_norm_backward(x_, dy, scale_ ? &gamma_.value : nullptr, mean_, rstd_, dx,
                               scale_ ? &gamma_.grad : nullptr, center_ ? &beta_.grad : nullptr);
  if (!need_dx) return {};
  return dx;
}

Tensor LayerNormalization::decode(const Tensor& x, int64_t) {
  const int64_t rows = x.numel() / x.dim(-1);
  Tensor y(x.shape(), device()), mean({rows}, device()), rstd({rows}, device());
  kernels::layer_norm_forward(x, scale_ ? &gamma_.value : nullptr, center_ ? &beta_.value : nullptr, epsilon_, y, mean,
                              rstd);
  return y;
}

const LayerType& layer_normalization_layer_type() {
  static const LayerType type{
      "LayerNormalization",
      "normalises each position over the last axis, `(x - mean) / sqrt(variance + epsilon) * gamma + beta`",
      {{"axis", "-1 (the only axis dtrain normalises over)"},
       {"epsilon", "0.001"},
       {"center", "true: learn beta"},
       {"scale", "true: learn gamma"}},
      [](config::Section& r) {
        auto o = std::make_shared<LayerNormalizationOptions>();
        if (const auto axis = r.find("axis")) {
          // Keras writes the last axis as -1, or as a list of one (e.g. [2] for (batch, time, features)).
          const bool last = axis->is_array() ? axis->size() == 1 : axis->is_integer() && axis->to_int(-1) == -1;
          if (!last) throw ConfigError(str(axis->path(), ": dtrain normalises over the last axis only; use -1"));
        }
        o->epsilon = r.get_double("epsilon", o->epsilon, config::kPositive);
        o->center = r.get_bool("center", o->center);
        o->scale = r.get_bool("scale", o->scale);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<LayerNormalizationOptions>();
        return std::make_unique<LayerNormalization>(ctx.name, input, static_cast<float>(o.epsilon), o.center,
                                                    o.scale);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
