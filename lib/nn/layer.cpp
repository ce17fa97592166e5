// Implementation of the Layer base helpers and initialisers.
#include "nn/layer.h"

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "kernels/device.h"

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
  return reuse(slot, n, per_sample, compute_dtype_);
}

Tensor& Layer::reuse(Tensor& slot, int64_t n, const Shape& per_sample, DType dtype) const {
  Shape want = with_batch(n, per_sample);
  if (!slot.defined() || slot.shape() != want || slot.device() != device_ || slot.dtype() != dtype)
    slot = Tensor(std::move(want), device_, dtype);
  return slot;
}

void Layer::set_compute_dtype(DType dtype) {
  DT_CHECK(supports_dtype(dtype), type_, " layer '", name_, "' cannot compute in ", dtype_name(dtype));
  compute_dtype_ = dtype;
}

void Layer::refresh_compute_weights() {
  for (Layer* child : children()) child->refresh_compute_weights();
}

bool Layer::supports_product_dtype(DType dtype) const {
  if (dtype == DType::kF32) return true;
  // (children() is not const: it hands out the layers to change)
  for (Layer* child : const_cast<Layer*>(this)->children())
    if (child->supports_product_dtype(dtype)) return true;
  return false;
}

void Layer::set_product_dtype(DType dtype) {
  DT_CHECK(supports_product_dtype(dtype), type_, " layer '", name_, "' cannot take products in ", dtype_name(dtype));
  product_dtype_ = dtype;
  for (Layer* child : children()) child->set_product_dtype(child->supports_product_dtype(dtype) ? dtype : DType::kF32);
}

int64_t Layer::weight_copy_bytes(DType) const {
  int64_t bytes = 0;
  for (const Layer* child : const_cast<Layer*>(this)->children()) bytes += child->weight_copy_bytes(DType::kF32);
  return bytes;
}

void apply_model_dtype(Layer& layer, DType model_dtype) {
  const bool computes = layer.supports_dtype(model_dtype);
  layer.set_compute_dtype(computes ? model_dtype : DType::kF32);
  layer.set_product_dtype(!computes && layer.supports_product_dtype(model_dtype) ? model_dtype : DType::kF32);
}

const Tensor& Layer::compute_weights(const Param& p, const Tensor& copy) const {
  return weight_copy_dtype() == DType::kF32 ? p.value : copy;
}

Tensor in_dtype(const Tensor& x, DType dtype, Tensor& slot) {
  if (x.dtype() == dtype) return x;
  if (!slot.defined() || slot.shape() != x.shape() || slot.dtype() != dtype || slot.device() != x.device())
    slot = Tensor(x.shape(), x.device(), dtype);
  kernels::cast(x, slot);
  return slot;
}

void Layer::refresh_copy(const Param& p, Tensor& copy) const {
  const DType dtype = weight_copy_dtype();
  if (dtype != DType::kF32) in_dtype(p.value, dtype, copy);  // (the values are float32: always cast)
}

Tensor Layer::product_operand(const Tensor& x, Tensor& slot) const {
  return product_dtype_ == DType::kF32 ? x : in_dtype(x, product_dtype_, slot);
}

namespace {

// Runs `pass` between two waits for the device and adds its time to seconds/calls.
template <class Pass>
Tensor timed(const Device& device, double& seconds, int64_t& calls, Pass pass) {
  kernels::synchronize(device);  // why: time this layer's work alone
  Stopwatch timer;
  Tensor out = pass();
  kernels::synchronize(device);
  seconds += timer.seconds();
  calls += 1;
  return out;
}

}  // namespace

Tensor Layer::run_forward(const Tensor& x, const StepContext& ctx) {
  if (!profiling_) return forward(x, ctx);
  return timed(device_, time_.forward_seconds, time_.forward_calls, [&] { return forward(x, ctx); });
}

Tensor Layer::run_backward(const Tensor& dy, bool need_dx) {
  if (!profiling_) return backward(dy, need_dx);
  return timed(device_, time_.backward_seconds, time_.backward_calls, [&] { return backward(dy, need_dx); });
}

void Layer::set_profiling(bool on) {
  profiling_ = on;
  time_ = LayerTime{};
  for (Layer* child : children()) child->set_profiling(on);
}

void Layer::set_device(const Device& device) {
  device_ = device;
  move_extras(device);
}

Tensor Layer::decode(const Tensor&, int64_t) {
  throw ConfigError(str(type_, " layer '", name_, "' cannot generate tokens: dtrain generate runs models of "
                        "Embedding / TokenAndPositionEmbedding, TransformerDecoder, MultiHeadAttention (causal), "
                        "LayerNormalization, Dense, Dropout, Activation and Residual layers"));
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

int64_t Layer::output_bytes(int64_t rows, DType dtype) const {
  return rows * shape_numel(output_shape_) * static_cast<int64_t>(dtype_size(dtype));
}

int64_t Layer::input_bytes(int64_t rows, DType dtype) const {
  return rows * shape_numel(input_shape_) * static_cast<int64_t>(dtype_size(dtype));
}

LayerBuffers Layer::buffers(int64_t rows, DType dtype, bool need_dx) const {
  return {output_bytes(rows, dtype), need_dx ? input_bytes(rows, dtype) : 0};
}

}  // namespace dtrain::nn
