// Building layers from their specs: make_layer() hands a LayerSpec to its type's
// builder (layer_registry.h), and the helpers here are what the builders share:
// Keras' automatic names, output shapes under "valid"/"same" padding, and the
// checks that make a shape mismatch a clear ConfigError naming the layer's JSON
// path and both shapes, e.g. "model.layers[3] (Dense 'dense'): expects a flat input".
#pragma once

#include <map>
#include <memory>
#include <string>

#include "nn/layer.h"
#include "nn/model_spec.h"

namespace dtrain::nn {

// Keras' automatic layer names: dense, dense_1, conv2d, max_pooling2d, ...
// `counts` tracks how many of each base name were handed out.
std::string auto_layer_name(const std::string& type, std::map<std::string, int>& counts);

// Builds the layer `name` at model position `layer_index` (dropout masks derive
// from it). A Residual block names its own layers from `name_counts` as well.
std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& input, const std::string& name,
                                  uint64_t layer_index, std::map<std::string, int>& name_counts);

// "model.layers[3] (Dense 'dense_1')", for messages.
std::string layer_where(const LayerSpec& spec, const std::string& name);
// An (H, W, C) input, or a ConfigError that says so.
void require_image(const LayerSpec& spec, const std::string& name, const Shape& input);

// Output length and padding along one axis (Keras/TF rules).
struct AxisPlan {
  int64_t out = 0, pad_before = 0, pad_after = 0;
};
// Plans a 2-D window (conv kernel or pool, `what` names it) over an (H, W, C)
// input; a window that does not fit is a ConfigError suggesting "same".
void plan_window(const LayerSpec& spec, const std::string& name, const Shape& input, const int64_t k[2],
                 const int64_t s[2], bool same, const char* what, AxisPlan out[2]);

}  // namespace dtrain::nn
