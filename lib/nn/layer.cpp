// Implementation of the Layer base helpers and initialisers.
#include "nn/layer.h"

#include <cmath>

namespace dtrain::nn {

Layer::Layer(std::string name, std::string type, Shape input_shape, Shape output_shape)
    : name_(std::move(name)),
      type_(std::move(type)),
      input_shape_(std::move(input_shape)),
      output_shape_(std::move(output_shape)) {}

Shape with_batch(int64_t n, const Shape& per_sample) {
  Shape s{n};
  s.insert(s.end(), per_sample.begin(), per_sample.end());
  return s;
}

Tensor& Layer::reuse(Tensor& slot, int64_t n, const Shape& per_sample) const {
  Shape want = with_batch(n, per_sample);
  if (!slot.defined() || slot.shape() != want || slot.device() != device_) slot = Tensor(std::move(want), device_);
  return slot;
}

void Layer::set_device(const Device& device) {
  device_ = device;
  move_extras(device);
}

Tensor Layer::before_activation(kernels::Activation act, const Tensor& y, const Tensor& dy,
                                Tensor& slot) const {
  if (act == kernels::Activation::kLinear) return dy;
  Tensor& d = reuse(slot, dy.dim(0), output_shape_);
  kernels::activation_backward(act, y, dy, d);
  return d;
}

void glorot_uniform(Tensor& t, int64_t fan_in, int64_t fan_out, Rng& rng) {
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng.uniform(-limit, limit));
}

}  // namespace dtrain::nn
