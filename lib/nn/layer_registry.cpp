// The layer registry's table (layer_types.inc) and the activation helpers the
// entries share.
#include "nn/layer_registry.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::nn {

#define DT_LAYER_TYPE(kind, function) const LayerType& function();
#include "nn/layer_types.inc"
#undef DT_LAYER_TYPE

const std::vector<const LayerType*>& layer_types() {
  static const std::vector<const LayerType*> all = {
#define DT_LAYER_TYPE(kind, function) &function(),
#include "nn/layer_types.inc"
#undef DT_LAYER_TYPE
  };
  return all;
}

const LayerType* find_layer_type(const std::string& name) {
  for (const LayerType* t : layer_types())
    if (t->name == name) return t;
  return nullptr;
}

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names = {"relu", "sigmoid", "tanh", "softmax", "gelu", "gelu_approximate", "linear"};
  return names;
}

kernels::Activation read_activation(const config::Value& value) {
  using kernels::Activation;
  if (value.is_null()) return Activation::kLinear;  // Keras: activation=None
  const std::string name = value.to_choice(activation_names(), "activation");
  if (name == "relu") return Activation::kRelu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  if (name == "softmax") return Activation::kSoftmax;
  if (name == "gelu") return Activation::kGelu;  // Keras' default: approximate=False
  if (name == "gelu_approximate") return Activation::kGeluTanh;  // keras_hub's name for approximate=True
  return Activation::kLinear;
}

kernels::Activation get_activation(config::Section& r, const std::string& key, kernels::Activation fallback) {
  const auto value = r.find(key);
  return value ? read_activation(*value) : fallback;
}

kernels::Activation get_fused_activation(config::Section& r, const std::string& key, kernels::Activation fallback) {
  const kernels::Activation act = get_activation(r, key, fallback);
  if (kernels::grad_from_input(act))
    throw ConfigError(str(r.path_of(key), ": ", activation_name(act),
                          " is for Dense and Activation layers here; use activation linear and add "
                          "{\"type\": \"Activation\", \"activation\": \"", activation_name(act), "\"} after it"));
  return act;
}

std::string activation_name(kernels::Activation activation) {
  using kernels::Activation;
  switch (activation) {
    case Activation::kRelu: return "relu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    case Activation::kSoftmax: return "softmax";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_approximate";
    case Activation::kLinear: return "linear";
  }
  return "linear";
}

}  // namespace dtrain::nn
