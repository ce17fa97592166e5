// Sequential: the model described by ModelSpec, a stack of layers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/model_spec.h"
#include "nn/layer.h"
#include "tensor/arena.h"

namespace dtrain::nn {

// What a model's top-level layers are, without building the whole model: each
// layer is built on its own (for its name, shapes and param count) and dropped.
struct LayerInfo {
  std::string name, type;
  LayerKind kind = LayerKind::kDense;  // (type's registry value: what code compares)
  Shape input_shape, output_shape;
  int64_t params = 0;            // elements of all its params (trainable and state)
  int64_t trainable_params = 0;  // elements of its trainable params
};
std::vector<LayerInfo> describe_layers(const ModelSpec& spec);

// Calls around each top-level layer's forward and backward, in training and in
// evaluation: a fully sharded strategy gathers a layer's parameters before it
// runs and frees them after (strategy/sync/fully_sharded.h). Any of them may be empty.
struct LayerHooks {
  std::function<void(size_t layer)> before_forward, after_forward, before_backward, after_backward;
};

class Sequential {
 public:
  // Builds every layer, checking shapes (ConfigError on a mismatch), and
  // initialises parameters deterministically from `seed`.
  Sequential(const ModelSpec& spec, uint64_t seed);
  // Layers [first, last) of the model of `spec` only (a pipeline stage): the same
  // names, shapes and initial values those layers have in the whole model; the
  // input shape is the output shape of layer first - 1.
  Sequential(const ModelSpec& spec, uint64_t seed, size_t first, size_t last);

  // Moves every param into one arena on `device` (one allocation), laid out as
  // [trainable values][their grads][non-trainable state][room for
  // `optimizer_slots` slot tensors per trainable param, for the optimizer's
  // create_state], and moves the layers' own tensors there. Values are kept.
  // With `gradient_memory` (a zero-filled 1-D float32 host tensor of at least
  // gradient_floats() values, e.g. a shared-memory area that the communicator
  // reduces in place) the grads go there instead, in the same layout, and the
  // arena holds the rest.
  void place(const Device& device, int optimizer_slots, Tensor gradient_memory = Tensor());
  // Floats the grads take in an arena (each trainable param's, padded).
  int64_t gradient_floats() const;
  // The arena of place(), or nullptr before it.
  TensorArena* arena() { return arena_.get(); }
  const Device& device() const { return device_; }

  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const;
  // The token vocabulary of its first layer (input_vocabulary(); none for a
  // pipeline stage after the first).
  const InputVocabulary& input_vocabulary() const { return input_vocabulary_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

  // The dtype layers compute in (ModelSpec::compute_dtype): each layer that
  // supports it computes in it, the others in float32; activations are converted
  // between layers where their dtypes differ.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_dtype_; }

  // x (N, input_shape...) -> (N, output_shape...), float32 whatever the compute dtype.
  // With a low-precision compute dtype, the layers' weight copies are remade first
  // when ctx.weights_changed.
  Tensor forward(const Tensor& x, const StepContext& ctx);
  // Back-propagates dloss/doutput through all layers, setting every param's grad.
  // The gradient with respect to the model's input is not computed. on_layer_done(i)
  // runs as soon as layer i's grads are final (last layer first), so gradient
  // exchange can start while backward goes on.
  // With `input_grad`, the gradient with respect to the model's input is computed
  // too and returned in float32 (a pipeline stage sends it to the stage before);
  // else an undefined tensor is returned.
  Tensor backward(const Tensor& doutput, const std::function<void(size_t layer)>& on_layer_done = {},
                  bool input_grad = false);

  // Every param (trainable and state) in a fixed order: layer order, then the layer's order.
  // Generation (Layer::decode), in float32: start_decoding readies every layer
  // for `positions` positions of `batch` sequences; decode gives position t's
  // outputs, (batch, outputs...), from its token ids, (batch), positions in order.
  void start_decoding(int64_t batch, int64_t positions);
  Tensor decode(const Tensor& ids, int64_t position);

  std::vector<Param*> params() const;
  std::vector<Param*> trainable_params() const;
  int64_t count_params(bool trainable_only) const;

  // Hooks around every forward and backward from now on (LayerHooks{}: none).
  // after_backward(i) runs before backward()'s on_layer_done(i).
  void set_hooks(LayerHooks hooks) { hooks_ = std::move(hooks); }

  // SHA-256 over every param's name, shape and float32 bytes, in params() order.
  std::string params_sha256() const;
  // The bytes params_sha256() hashes, handed to `feed` piece by piece (a pipeline
  // stage sends its part of the whole model's hash input to the chief).
  void hash_input(const std::function<void(const void* data, size_t size)>& feed) const;

  // A table like Keras' model.summary().
  std::string summary() const;

  // Per-layer timing (for `dtrain bench train --profile`) of every layer, those
  // inside Residual blocks too: see Layer::set_profiling and Layer::time().
  void set_profiling(bool on);

 private:
  // ConfigError when two layers (Residual blocks' included) share a name.
  void check_unique_names() const;

  Shape input_shape_;
  InputVocabulary input_vocabulary_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Device device_;
  std::unique_ptr<TensorArena> arena_;
  std::unique_ptr<TensorArena> gradient_arena_;  // place()'s gradient_memory, when given
  DType compute_dtype_ = DType::kF32;
  LayerHooks hooks_;
  // Activations and gradients converted between layers of different dtypes: slot i
  // is layer i's input (and its output's gradient); the last, the model's output.
  std::vector<Tensor> cast_forward_, cast_backward_;
};

}  // namespace dtrain::nn
