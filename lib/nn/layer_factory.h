// Builds a layer from its LayerSpec and the shape of its input, checking that the
// two fit. Shape problems are ConfigErrors that name the layer's JSON path and
// both shapes, e.g. "model.layers[3] (Dense 'dense'): expects a flat input ...".
#pragma once

#include <map>
#include <memory>
#include <string>

#include "config/model_spec.h"
#include "kernels/ops.h"
#include "nn/layer.h"

namespace dtrain::nn {

// Parses an activation name (relu, sigmoid, tanh, softmax, linear); `where` names
// the JSON path in the error for anything else.
kernels::Activation parse_activation(const std::string& name, const std::string& where);

// Keras' automatic layer names: dense, dense_1, conv2d, max_pooling2d, ...
// `counts` tracks how many of each base name were handed out.
std::string auto_layer_name(const std::string& type, std::map<std::string, int>& counts);

// Builds the layer `name` at model position `layer_index` (dropout masks derive
// from it). A Residual block names its own layers from `name_counts` as well.
std::unique_ptr<Layer> make_layer(const config::LayerSpec& spec, const Shape& input,
                                  const std::string& name, uint64_t layer_index,
                                  std::map<std::string, int>& name_counts);

}  // namespace dtrain::nn
