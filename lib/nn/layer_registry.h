// The layer registry: every model.layers type, each declared in the file that
// implements it (its options struct, its keys, its reader and its builder) and
// listed by one line in layer_types.inc. Parsing (model_spec.cpp), building
// (layer_factory.h's make_layer), the unknown-key notes and the README's layer
// table all come from these entries.
//
// Adding a layer: a file lib/nn/<name>.cpp with the layer class and a function
// `const LayerType& <name>_layer_type()` returning its entry, that file in
// lib/nn/CMakeLists.txt, and one DT_LAYER_TYPE line in layer_types.inc (its
// LayerKind and that function).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/section.h"
#include "kernels/ops.h"
#include "nn/layer.h"
#include "nn/model_spec.h"

namespace dtrain::nn {

// What a builder gets besides the spec: where the layer sits and the automatic
// names handed out so far (a Residual block names its own layers from them).
struct BuildContext {
  std::string name;          // the layer's final name
  uint64_t layer_index = 0;  // dropout masks derive from it
  std::map<std::string, int>* name_counts = nullptr;
};

struct LayerType {
  std::string name;                  // "Dense", Keras' class name
  std::string doc;                   // one line for the README's table
  std::vector<config::KeyDoc> keys;  // its keys beyond "type" and "name"
  // Reads the keys (already declared to `r`); `r.finish()` is called after.
  std::function<std::shared_ptr<const LayerOptions>(config::Section& r)> read;
  // Builds the layer for an input of `input` shape; shape problems are ConfigErrors
  // naming spec.path, the layer and both shapes.
  std::function<std::unique_ptr<Layer>(const LayerSpec& spec, const Shape& input, BuildContext& ctx)> build;
  // The layer specs nested in it (a Residual's branches), for the name checks.
  std::function<std::vector<const LayerSpec*>(const LayerOptions&)> children;
};

// Every layer type, in layer_types.inc's order.
const std::vector<const LayerType*>& layer_types();
// The entry named `name`, or nullptr.
const LayerType* find_layer_type(const std::string& name);

// Shared by the entries' readers: an activation key ("relu", ..., JSON null =
// linear) and the names of the activations.
const std::vector<std::string>& activation_names();
kernels::Activation read_activation(const config::Value& value);
kernels::Activation get_activation(config::Section& r, const std::string& key, kernels::Activation fallback);
// The same, refusing gelu (whose gradient needs its input, which Conv2D and
// Residual do not keep).
kernels::Activation get_fused_activation(config::Section& r, const std::string& key, kernels::Activation fallback);
std::string activation_name(kernels::Activation activation);

}  // namespace dtrain::nn
