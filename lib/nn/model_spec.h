// ModelSpec, LayerSpec and LossSpec: the typed `model` and `loss` sections of a job
// (Keras' names), read through nn's registries (layer_registry.h, losses.h) and
// built by Sequential. Each spec keeps the JSON path it came from (`path`), so
// building can name it in its errors ("model.layers[3] (Dense 'dense_1'): ...").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/section.h"
#include "tensor/tensor.h"

namespace dtrain::nn {

struct LayerType;  // layer_registry.h
struct LossType;   // losses.h

// A layer type's own options (Dense's units, ...): each type derives its struct.
struct LayerOptions {
  virtual ~LayerOptions() = default;
};

// Every layer type as a value, in layer_types.inc's order: what code compares
// after parsing (never a type's name, outside the readers).
enum class LayerKind {
#define DT_LAYER_TYPE(kind, function) kind,
#include "nn/layer_types.inc"
#undef DT_LAYER_TYPE
};

// One entry of model.layers.
struct LayerSpec {
  std::string path;                 // "model.layers[3]"
  const LayerType* type = nullptr;  // its registry entry
  std::string name;                 // Keras-style name; "" = automatic (dense, dense_1, ...)
  std::shared_ptr<const LayerOptions> options;

  const std::string& type_name() const;
  LayerKind kind() const;  // its entry's place in the registry
  // The options as the type's own struct (a wrong type is an InternalError).
  template <class T>
  const T& options_as() const {
    const T* o = dynamic_cast<const T*>(options.get());
    if (!o) bad_options();
    return *o;
  }

 private:
  [[noreturn]] void bad_options() const;
};

struct ModelSpec {
  std::string path = "model";
  std::string keras_json;  // the Keras file the model was read from (model.keras_json), or ""
  std::vector<int64_t> input_shape;  // e.g. [28, 28, 1] or [784]
  std::vector<LayerSpec> layers;
  // The dtype layers compute in (train.precision: bfloat16 for mixed_bfloat16);
  // layers without a kernel for it compute in float32 (Layer::supports_dtype).
  DType compute_dtype = DType::kF32;
};

// The token vocabulary a model's first layer takes (Embedding's input_dim,
// TokenAndPositionEmbedding's vocabulary_size) and the key that sets it
// ("model.layers[0].input_dim"); size 0 when the model does not start with one.
struct InputVocabulary {
  int64_t size = 0;
  std::string key;
};
InputVocabulary input_vocabulary(const ModelSpec& spec);

struct LossSpec {
  std::string path = "loss";
  const LossType* type = nullptr;  // losses.h's registry entry (nullptr: sparse_categorical_crossentropy)
  bool from_logits = false;        // the crossentropies: the model outputs logits
};

// Reads the model section: input_shape and layers (each through its type's entry),
// with explicit layer names unique across the model (Residual blocks included);
// or `keras_json` alone, the file of Keras' model.to_json() (keras_model.h).
ModelSpec read_model_spec(const config::Value& value);
// One layer object at value.path().
LayerSpec read_layer_spec(const config::Value& value);
// An array of layer objects; an empty one fails with `if_empty`, or is allowed when
// that is null (a Residual's identity shortcut).
std::vector<LayerSpec> read_layer_list(const config::Value& value, const char* if_empty);
// Reads the loss: a name, or {"type", "from_logits"}.
LossSpec read_loss_spec(const config::Value& value);

}  // namespace dtrain::nn
