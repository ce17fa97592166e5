// The model a Keras user already has: `model.keras_json`, the file Keras'
// model.to_json() writes (tf-keras 2.x or Keras 3; a Sequential, or a
// Functional model of chains and residual blocks, read by keras_graph.h),
// turned into dtrain's own model section with the same layer names and options.
//
// Each Keras layer becomes the dtrain layer of the same class name (Dense,
// Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten,
// Dropout, BatchNormalization, Activation, Embedding, keras_hub's
// PositionEmbedding, LayerNormalization, MultiHeadAttention); an Add that closes
// a residual block becomes a Residual of its name; the input shape comes from the
// InputLayer (batch_shape / batch_input_shape) or the first layer's build
// shape. Options dtrain implements are copied; options it does not are accepted
// only at the value that means "not used" (Keras' default: dilation 1, groups 1,
// channels_last, no regularizer or constraint, float32, Glorot-uniform kernels,
// zero biases...). Anything else, and any other layer class, is a ConfigError
// naming the file, the layer's place in it ("config.layers[2]
// (Conv2DTranspose 'conv2d_transpose')") and the option. Initializer seeds are
// not used: dtrain draws initial values from train.seed.
#pragma once

#include <string>

namespace dtrain::nn {

// The model section (JSON text: {"input_shape": [...], "layers": [...]}) for
// the Keras JSON `text` read from `file` (named in errors).
std::string keras_json_to_model_json(const std::string& text, const std::string& file);

}  // namespace dtrain::nn
