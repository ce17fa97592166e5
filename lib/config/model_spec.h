// ModelSpec and LossSpec: the typed `model` and `loss` sections of a job (Keras'
// names), what lib/nn builds from. Parsed and checked by job_config.cpp; each spec
// keeps the JSON path it came from (`path`) so nn can name it in its errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::config {

// One entry of model.layers. A flat struct: each layer type reads the fields it
// knows; job_config.cpp rejects keys that do not belong to the type.
struct LayerSpec {
  std::string path;      // "model.layers[3]"
  std::string type;      // Dense, Conv2D, MaxPooling2D, AveragePooling2D,
                         // GlobalAveragePooling2D, Flatten, Dropout,
                         // BatchNormalization, Activation, Residual
  std::string name;      // Keras-style name; "" = auto (dense, dense_1, ...)
  std::string activation = "linear";  // relu, sigmoid, tanh, softmax, linear
  bool use_bias = true;
  int64_t units = 0;                  // Dense
  int64_t filters = 0;                // Conv2D
  int64_t kernel_size[2] = {0, 0};    // Conv2D (int or [h, w] in JSON)
  int64_t strides[2] = {1, 1};        // Conv2D, pooling (pooling default: pool_size)
  std::string padding = "valid";      // valid | same
  int64_t pool_size[2] = {2, 2};      // pooling
  double rate = 0.0;                  // Dropout, in [0, 1)
  double momentum = 0.99;             // BatchNormalization
  double epsilon = 1e-3;              // BatchNormalization
  bool center = true;                 // BatchNormalization
  bool scale = true;                  // BatchNormalization
  // Residual: y = activation(layers(x) + shortcut(x)); an empty shortcut is the identity.
  std::vector<LayerSpec> layers, shortcut;
};

struct ModelSpec {
  std::string path = "model";
  std::vector<int64_t> input_shape;  // e.g. [28, 28, 1] or [784]
  std::vector<LayerSpec> layers;
};

struct LossSpec {
  std::string path = "loss";
  std::string type = "sparse_categorical_crossentropy";  // | categorical_crossentropy | mse
  bool from_logits = false;
};

}  // namespace dtrain::config
