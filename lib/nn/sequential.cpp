// Implementation of sequential.h.
#include "nn/sequential.h"

#include <cstdio>
#include <map>

#include "core/check.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "kernels/ops.h"
#include "nn/layer_factory.h"

namespace dtrain::nn {

std::vector<LayerInfo> describe_layers(const ModelSpec& spec) {
  if (spec.layers.empty()) throw ConfigError(str(spec.path, ".layers: the model has no layers"));
  const UnfilledTensors shapes_only;  // (the layers' values are never read here)
  std::vector<LayerInfo> out;
  std::map<std::string, int> name_counts;
  Shape shape(spec.input_shape.begin(), spec.input_shape.end());
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const auto& ls = spec.layers[i];
    const std::string name = ls.name.empty() ? auto_layer_name(ls.type_name(), name_counts) : ls.name;
    const std::unique_ptr<Layer> layer = make_layer(ls, shape, name, i, name_counts);
    LayerInfo info{layer->name(), layer->type(), ls.kind(), shape, layer->output_shape()};
    for (const Param* p : layer->params()) {
      info.params += p->value.numel();
      if (p->trainable()) info.trainable_params += p->value.numel();
    }
    shape = layer->output_shape();
    out.push_back(std::move(info));
  }
  return out;
}

Sequential::Sequential(const ModelSpec& spec, uint64_t seed) : Sequential(spec, seed, 0, spec.layers.size()) {}

Sequential::Sequential(const ModelSpec& spec, uint64_t seed, size_t first, size_t last)
    : input_shape_(spec.input_shape.begin(), spec.input_shape.end()) {
  if (spec.layers.empty()) throw ConfigError(str(spec.path, ".layers: the model has no layers"));
  DT_CHECK(first < last && last <= spec.layers.size(), "layers [", first, ", ", last, ") of a model of ",
           spec.layers.size());
  std::map<std::string, int> name_counts;
  Shape shape = input_shape_;
  for (size_t i = 0; i < last; ++i) {
    const auto& ls = spec.layers[i];
    const std::string name = ls.name.empty() ? auto_layer_name(ls.type_name(), name_counts) : ls.name;
    std::unique_ptr<Layer> layer = make_layer(ls, shape, name, i, name_counts);
    shape = layer->output_shape();
    // A layer before the range is built only for its name and output shape.
    if (i + 1 == first) input_shape_ = shape;
    if (i >= first) layers_.push_back(std::move(layer));
  }
  check_unique_names();
  if (first == 0) input_vocabulary_ = nn::input_vocabulary(spec);
  // Each layer draws its initial values from its own stream (its index in the
  // whole model), so changing one layer leaves the others' initial values as
  // they were, and a stage starts as the same layers of the whole model do.
  for (size_t i = 0; i < layers_.size(); ++i) {
    Rng rng(hash_u64(seed, 0x696e6974ull /* "init" */, first + i));
    layers_[i]->initialize(rng);
  }
  set_compute_dtype(spec.compute_dtype);
}

void Sequential::set_compute_dtype(DType dtype) {
  compute_dtype_ = dtype;
  for (auto& layer : layers_) apply_model_dtype(*layer, dtype);
  cast_forward_.assign(layers_.size() + 1, Tensor());
  cast_backward_.assign(layers_.size() + 1, Tensor());
}

void Sequential::check_unique_names() const {
  // Params are named "<layer>/<param>" in checkpoints, so two layers may not share
  // a name: config checks explicit names against each other, this also catches an
  // explicit name that is another layer's automatic one.
  std::map<std::string, int> seen;
  std::function<void(Layer&)> visit = [&](Layer& layer) {
    if (seen[layer.name()]++ == 1)
      throw ConfigError(str("model.layers: two layers are named '", layer.name(),
                            "'; an explicit \"name\" may not be another layer's automatic one (Keras names layers "
                            "dense, dense_1, conv2d, ... in order): choose another name"));
    for (Layer* child : layer.children()) visit(*child);
  };
  for (auto& layer : layers_) visit(*layer);
}

int64_t Sequential::gradient_floats() const {
  int64_t floats = 0;
  for (const Param* p : params())
    if (p->trainable()) floats += TensorArena::padded(p->value.numel());
  return floats;
}

void Sequential::place(const Device& device, int optimizer_slots, Tensor gradient_memory) {
  const std::vector<Param*> all = params();
  const int64_t trainable = gradient_floats();  // the values' floats too: the same layout
  int64_t state = 0;
  for (const Param* p : all)
    if (!p->trainable()) state += TensorArena::padded(p->value.numel());
  if (gradient_memory.defined()) {
    DT_CHECK(device.is_cpu() && gradient_memory.device().is_cpu(), "gradient memory of the host for a host model");
    DT_CHECK_GE(gradient_memory.numel(), trainable);
    gradient_arena_ = std::make_unique<TensorArena>(std::move(gradient_memory));
  }
  arena_ = std::make_unique<TensorArena>(device, trainable * ((gradient_arena_ ? 1 : 2) + optimizer_slots) + state);
  // Values, then grads, in the same order, so both are flat ranges with one layout.
  for (Param* p : all)
    if (p->trainable()) {
      Tensor v = arena_->take(p->value.shape());
      v.copy_from(p->value);
      p->value = v;
    }
  for (Param* p : all)
    if (p->trainable()) p->grad = (gradient_arena_ ? *gradient_arena_ : *arena_).take(p->grad.shape());
  for (Param* p : all)
    if (!p->trainable()) {
      Tensor v = arena_->take(p->value.shape());
      v.copy_from(p->value);
      p->value = v;
    }
  for (auto& layer : layers_) layer->set_device(device);
  device_ = device;
  set_compute_dtype(compute_dtype_);  // what each layer computes in depends on the device
}

void Sequential::set_profiling(bool on) {
  for (auto& layer : layers_) layer->set_profiling(on);
}

const Shape& Sequential::output_shape() const { return layers_.back()->output_shape(); }

Tensor Sequential::forward(const Tensor& x, const StepContext& ctx) {
  // Samples of the right size but another shape (e.g. (28, 28, 1) images into an
  // input_shape of [784]) are viewed in the model's input shape.
  Tensor h = x.shape() == with_batch(x.dim(0), input_shape_) ? x : x.reshaped(with_batch(x.dim(0), input_shape_));
  if (compute_dtype_ != DType::kF32 && ctx.weights_changed)
    for (auto& layer : layers_) layer->refresh_compute_weights();
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = in_dtype(h, layers_[i]->compute_dtype(), cast_forward_[i]);
    if (hooks_.before_forward) hooks_.before_forward(i);
    h = layers_[i]->run_forward(h, ctx);
    if (hooks_.after_forward) hooks_.after_forward(i);
  }
  // The loss is computed in float32 (Keras' mixed precision casts the outputs).
  return in_dtype(h, DType::kF32, cast_forward_.back());
}

void Sequential::start_decoding(int64_t batch, int64_t positions) {
  for (auto& layer : layers_) layer->start_decoding(batch, positions);
}

Tensor Sequential::decode(const Tensor& ids, int64_t position) {
  Tensor h = ids;
  for (auto& layer : layers_) h = layer->decode(h, position);
  return h;
}

Tensor Sequential::backward(const Tensor& doutput, const std::function<void(size_t layer)>& on_layer_done,
                            bool input_grad) {
  // Input gradients are needed only down to the first layer with parameters
  // (in an MLP that starts with Flatten, the first Dense needs no dx), unless
  // the caller wants the model input's.
  size_t first_with_params = layers_.size();
  for (size_t i = 0; i < layers_.size() && first_with_params == layers_.size(); ++i)
    if (!layers_[i]->params().empty()) first_with_params = i;
  Tensor g = doutput;
  for (size_t i = layers_.size(); i-- > 0;) {
    if (!input_grad && i < first_with_params) {
      // Below the first layer with parameters nothing is left to compute (and g,
      // not computed, cannot be converted to a layer's dtype).
      if (on_layer_done) on_layer_done(i);
      continue;
    }
    g = in_dtype(g, layers_[i]->compute_dtype(), cast_backward_[i]);
    if (hooks_.before_backward) hooks_.before_backward(i);
    g = layers_[i]->run_backward(g, /*need_dx=*/input_grad || i > first_with_params);
    if (hooks_.after_backward) hooks_.after_backward(i);
    if (on_layer_done) on_layer_done(i);
  }
  if (!input_grad) return Tensor();
  return in_dtype(g, DType::kF32, cast_backward_.back());
}

std::vector<Param*> Sequential::params() const {
  std::vector<Param*> out;
  for (auto& layer : layers_)
    for (Param* p : layer->params()) out.push_back(p);
  return out;
}

std::vector<Param*> Sequential::trainable_params() const {
  std::vector<Param*> out;
  for (Param* p : params())
    if (p->trainable()) out.push_back(p);
  return out;
}

int64_t Sequential::count_params(bool trainable_only) const {
  int64_t n = 0;
  for (Param* p : params())
    if (!trainable_only || p->trainable()) n += p->value.numel();
  return n;
}

std::string Sequential::params_sha256() const {
  Sha256 h;
  hash_input([&](const void* data, size_t size) { h.update(data, size); });
  return h.hex_digest();
}

void Sequential::hash_input(const std::function<void(const void* data, size_t size)>& feed) const {
  for (Param* p : params()) {
    feed(p->name.data(), p->name.size());
    const std::string shape = shape_str(p->value.shape());
    feed(shape.data(), shape.size());
    const Tensor host = p->value.to_host();
    feed(host.data(), host.bytes());
  }
}

std::string Sequential::summary() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-48s %-22s %10s\n", "Layer (type)", "Output Shape", "Param #");
  out += line;
  // The layers inside a Residual block follow it, indented (Keras' expand_nested).
  std::function<void(Layer&, int)> row = [&](Layer& layer, int depth) {
    int64_t n = 0;
    for (Param* p : layer.params()) n += p->value.numel();
    const std::string label =
        std::string(2 * static_cast<size_t>(depth), ' ') + layer.name() + " (" + layer.type() + ")";
    const Shape& shape = layer.output_shape();
    std::string shape_text = "(None, " + shape_str(shape).substr(1);
    if (shape.size() == 1) shape_text = "(None, " + std::to_string(shape[0]) + ")";
    std::snprintf(line, sizeof line, "%-48s %-22s %10lld\n", label.c_str(), shape_text.c_str(),
                  static_cast<long long>(n));
    out += line;
    for (Layer* child : layer.children()) row(*child, depth + 1);
  };
  for (auto& layer : layers_) row(*layer, 0);
  out += str("Total params: ", count_params(false), " (trainable: ", count_params(true), ")\n");
  return out;
}

}  // namespace dtrain::nn
