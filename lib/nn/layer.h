// Layer: the unit a Sequential model is made of, and Param, the tensors it owns.
//
// Shapes without the batch dimension are "per-sample" shapes (Keras' input_shape).
// forward() keeps what backward() needs (its input, its output); backward() sets
// the gradients of the layer's trainable params (overwriting them) and returns the
// gradient with respect to its input.
//
// Mixed precision: a layer computes in its compute_dtype() (float32, or bfloat16
// when it supports_dtype() it and the model asks); its input, output and their
// gradients are then in that dtype (Sequential converts between layers), while
// params, their gradients and optimizer state stay float32. Layers with weights
// keep low-precision copies of them, made by refresh_compute_weights().
// A layer that computes in float32 in such a model (gelu's Dense, attention,
// the layers inside a block) may still take its matrix products' operands in
// the model's dtype: its product_dtype(). It casts them itself (activations,
// gradients and its weight copies), and the products accumulate and write
// float32, so its input, output and other arithmetic stay float32.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace dtrain::nn {

struct Param {
  std::string name;  // Keras-style: "dense/kernel", "batch_normalization/moving_mean"
  Tensor value;
  Tensor grad;       // undefined for non-trainable state (e.g. moving statistics)
  bool trainable() const { return grad.defined(); }
};

// What a forward pass needs to know besides its input.
struct StepContext {
  bool training = false;
  uint64_t seed = 0;  // the job's seed; dropout masks derive from (seed, layer, step)
  int64_t step = 0;   // global training step
  // Whether the params may have changed since the last forward pass: the
  // low-precision weight copies (mixed precision) are remade when so. Only the
  // 2nd..Kth micro-batches of one update may say false.
  bool weights_changed = true;
};

// Time spent in a layer while profiling (see Layer::set_profiling).
struct LayerTime {
  double forward_seconds = 0.0, backward_seconds = 0.0;
  int64_t forward_calls = 0, backward_calls = 0;
};

// The memory a layer's step holds besides its parameters, in bytes (the
// per-layer part of strategy/planning/memory_estimate.h): `forward`, what its forward
// pass keeps for the backward pass (its output, a mask); `backward`, the
// gradient buffers its backward pass keeps between steps (its input's gradient,
// the gradient before a fused activation).
struct LayerBuffers {
  int64_t forward = 0;
  int64_t backward = 0;
};

class Layer {
 public:
  Layer(std::string name, std::string type, Shape input_shape, Shape output_shape);
  virtual ~Layer() = default;

  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }

  // x is (N, input_shape...), the result (N, output_shape...).
  virtual Tensor forward(const Tensor& x, const StepContext& ctx) = 0;
  // dy is (N, output_shape...). Returns dx, or an undefined tensor when !need_dx.
  virtual Tensor backward(const Tensor& dy, bool need_dx) = 0;

  // forward() / backward() as models call them: while profiling, they wait for
  // the device before and after and add the time to time().
  Tensor run_forward(const Tensor& x, const StepContext& ctx);
  Tensor run_backward(const Tensor& dy, bool need_dx);
  // Per-layer timing for `dtrain bench train --profile`, for this layer and the
  // layers inside it; turning it on or off clears the times. The waits slow
  // steps down: profile apart from throughput runs.
  void set_profiling(bool on);
  const LayerTime& time() const { return time_; }

  // Whether forward/backward can compute in `dtype` on the layer's device();
  // float32 always.
  virtual bool supports_dtype(DType dtype) const { return dtype == DType::kF32; }
  DType compute_dtype() const { return compute_dtype_; }
  // Sets the dtype to compute in (one the layer supports).
  void set_compute_dtype(DType dtype);
  // Remakes the low-precision copies of the weights from the float32 values
  // (Sequential calls it once before each forward pass); nothing in float32.
  // A layer made of others (children()) refreshes theirs.
  virtual void refresh_compute_weights();

  // Whether a float32 layer can take its products' operands in `dtype` on its
  // device (Dense and MultiHeadAttention: bfloat16 on the CPU); a layer made of
  // others when one of them can.
  virtual bool supports_product_dtype(DType dtype) const;
  DType product_dtype() const { return product_dtype_; }
  // Sets it (float32, or one the layer supports), and its children's where they support it.
  void set_product_dtype(DType dtype);

  // Its buffers for batches of `rows` rows computing in `dtype`; need_dx: whether
  // its backward computes its input's gradient. The default: its output, and the
  // input's gradient where computed (pooling, activations).
  virtual LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const;
  // Bytes of the copies of its weights it keeps to compute in `dtype` (mixed
  // precision: Dense's and Conv2D's kernel), or in float32 to take its products
  // in product_dtype(); 0 for most; a layer made of others, their sum.
  virtual int64_t weight_copy_bytes(DType dtype) const;

  // Generation with a cache (`dtrain generate`): start_decoding(batch, positions)
  // readies the layer for up to `positions` positions of `batch` sequences;
  // decode(x, t) takes position t's input alone, (batch, features) (token ids:
  // (batch)), and returns its output there. Positions come in order 0, 1, ...;
  // attention keeps each position's keys and values, so a new token costs one
  // position, not the whole window. The default refuses (a ConfigError naming
  // the layer): layers that are not position-wise, or not written for it.
  virtual void start_decoding(int64_t batch, int64_t positions) {}
  virtual Tensor decode(const Tensor& x, int64_t position);

  // The layers this one is made of (a Residual block's), in order; none for most.
  virtual std::vector<Layer*> children() { return {}; }

  // Trainable params first, then state, in a fixed order.
  virtual std::vector<Param*> params() { return {}; }
  // Sets initial values (Keras' defaults: glorot_uniform kernels, zero biases).
  virtual void initialize(Rng& rng) {}

  // The device the layer computes on. Sequential::place moves the params; this
  // moves what the layer keeps besides them and drops cached activations.
  const Device& device() const { return device_; }
  void set_device(const Device& device);

 protected:
  // Moves the layer's own tensors that are not params (constants, statistics).
  virtual void move_extras(const Device& device) {}
  // A tensor of shape (n, per_sample...) on the layer's device, in the compute
  // dtype (or `dtype`), kept in `slot` and reused while n is unchanged.
  Tensor& reuse(Tensor& slot, int64_t n, const Shape& per_sample) const;
  Tensor& reuse(Tensor& slot, int64_t n, const Shape& per_sample, DType dtype) const;
  // The weights as the kernels take them: `value` itself in float32, else `copy`
  // refreshed from it (refresh_compute_weights): in the compute dtype, or in a
  // float32 layer, the product dtype.
  const Tensor& compute_weights(const Param& p, const Tensor& copy) const;
  // The dtype of the weight copies: the compute dtype, else the product dtype.
  DType weight_copy_dtype() const { return compute_dtype_ != DType::kF32 ? compute_dtype_ : product_dtype_; }
  // A product's activation operand: x itself, or x cast into `slot` (reused)
  // when the layer takes its products' operands in another dtype.
  Tensor product_operand(const Tensor& x, Tensor& slot) const;
  void refresh_copy(const Param& p, Tensor& copy) const;
  // Bytes of `rows` rows of the output / the input, in `dtype`.
  int64_t output_bytes(int64_t rows, DType dtype) const;
  int64_t input_bytes(int64_t rows, DType dtype) const;
  // The gradient before an activation whose output was y: dy itself for linear,
  // else act'(.) * dy written into `slot`.
  Tensor before_activation(kernels::Activation act, const Tensor& y, const Tensor& dy, Tensor& slot) const;
  // A layer whose params were cut to a part of the whole layer's (Dense::split).
  void set_shapes(Shape input_shape, Shape output_shape) {
    input_shape_ = std::move(input_shape);
    output_shape_ = std::move(output_shape);
  }

 private:
  std::string name_, type_;
  Shape input_shape_, output_shape_;
  Device device_;
  DType compute_dtype_ = DType::kF32;
  DType product_dtype_ = DType::kF32;
  bool profiling_ = false;
  LayerTime time_;
};

// What `layer` computes in within a model of `model_dtype` (Sequential's rule,
// the memory estimate's too): that dtype where the layer supports it, else
// float32, with its products in that dtype where it supports those.
void apply_model_dtype(Layer& layer, DType model_dtype);

// x in `dtype`: x itself, or x converted into `slot` (reused while its shape,
// device and dtype hold). Sequential's conversions between layers, a layer's
// operand and weight copies.
Tensor in_dtype(const Tensor& x, DType dtype, Tensor& slot);

// Adds the batch dimension in front of a per-sample shape.
Shape with_batch(int64_t n, const Shape& per_sample);

// Glorot (Xavier) uniform initialisation: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).
void glorot_uniform(Tensor& t, int64_t fan_in, int64_t fan_out, Rng& rng);

}  // namespace dtrain::nn
