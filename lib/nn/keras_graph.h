// The graph of a Keras Functional model (the layers' inbound_nodes in what
// model.to_json() writes, tf-keras 2.x or Keras 3) read as dtrain's model tree:
// layers in a chain, and residual blocks. A tensor taken by two layers is the
// start of a residual block when both paths meet again in one `Add` of two
// inputs: one path may be empty (the identity, `x + f(x)`), or both hold layers
// (a projection shortcut). Blocks nest. Anything else (a layer called twice, a
// path that never rejoins, an Add of three inputs, several inputs or outputs) is
// a ConfigError naming the layer and what dtrain reads instead.
//
// Used by keras_model.cpp only; the file's own checks (layers are objects with
// a string class_name) come first.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace dtrain::nn::keras {

// One step of the model: config.layers[layer], or a residual block that the Add
// config.layers[layer] closes, with its two paths.
struct GraphItem {
  size_t layer = 0;
  bool residual = false;
  std::vector<GraphItem> layers;    // the block's main path (not empty)
  std::vector<GraphItem> shortcut;  // the other path; empty: the identity
};

// The model from config.layers[0] (the input) to its output (checked against
// config.output_layers). `error_prefix` starts every message ("model.keras_json:
// 'file'"). The first item is config.layers[0] itself.
std::vector<GraphItem> read_functional_graph(const nlohmann::json& config, const nlohmann::json& layers,
                                             const std::string& error_prefix);

// The keyword arguments the layer was called with (Keras 3: the node's "kwargs";
// tf-keras: the object after each input reference), or an empty object.
nlohmann::json call_kwargs(const nlohmann::json& layer);

// The layer's name: its own "name", else its config's, else "".
std::string layer_name(const nlohmann::json& layer);

}  // namespace dtrain::nn::keras
