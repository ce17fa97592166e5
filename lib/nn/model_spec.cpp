// Implementation of model_spec.h: reading the model section through the layer
// registry. Each layer object's keys are declared from its type's entry before
// anything is read, so a misspelt key is reported as unknown (with the closest
// valid key, or "'units' belongs to Dense layers"), not as a missing one.
#include "nn/model_spec.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/keras_model.h"
#include "nn/layer_registry.h"

namespace dtrain::nn {
namespace {
namespace fs = std::filesystem;

// Fails when an explicit layer name is used twice, anywhere in the model
// (Residual blocks included); `names` maps each name to its layer's path.
void check_unique_names(const config::Section& model, const std::vector<const LayerSpec*>& layers,
                        std::map<std::string, std::string>& names) {
  for (const LayerSpec* layer : layers) {
    if (!layer->name.empty()) {
      const auto [it, added] = names.emplace(layer->name, layer->path);
      if (!added)
        model.context().fail(str(layer->path, ".name"), str("the name '", layer->name, "' is already used by ",
                                                             it->second, "; layer names must be unique"));
    }
    if (layer->type->children) check_unique_names(model, layer->type->children(*layer->options), names);
  }
}

// The text of model.keras_json's file. A relative path is read from the working
// directory, as every path of a job file (data files, output.dir); the error
// names the path it tried, and the job file's directory when the file is there.
std::string read_keras_file(const std::string& file, const config::Context& job) {
  std::ifstream in(file, std::ios::binary);
  if (in) return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const std::string reason = std::strerror(errno);
  std::error_code ec;
  const fs::path tried = fs::absolute(file, ec).lexically_normal();
  std::string note = "the path of the file Keras' model.to_json() wrote";
  if (fs::path(file).is_relative()) {
    note += "; a relative path is read from the working directory, as every path in a job file";
    const fs::path beside = fs::path(job.source).parent_path() / file;
    if (!job.variable && beside != fs::path(file) && fs::is_regular_file(beside, ec))
      note += str(", and the job file's directory has it: write '", printable(beside.string(), 256), "'");
  }
  throw IoError(str("model.keras_json: cannot read '", printable(file, 256), "' (", printable(tried.string(), 256),
                    "): ", reason, " (", note, ")"));
}

}  // namespace

LayerKind LayerSpec::kind() const {
  const std::vector<const LayerType*>& all = layer_types();
  const auto found = std::find(all.begin(), all.end(), type);
  DT_CHECK(found != all.end(), path, ": a layer spec without its registry entry");
  return static_cast<LayerKind>(found - all.begin());
}

const std::string& LayerSpec::type_name() const {
  static const std::string none = "(no type)";
  return type ? type->name : none;
}

void LayerSpec::bad_options() const {
  throw InternalError(str(path, ": the options of this ", type_name(), " layer are of another type"));
}

LayerSpec read_layer_spec(const config::Value& value) {
  if (!value.is_object())
    value.fail(str("expected a layer object such as {\"type\": \"Dense\", \"units\": 10}, got ", value.describe()));
  config::Section r(value, "a layer");
  LayerSpec layer;
  layer.path = value.path();
  layer.type = find_layer_type(r.require_choice("type", config::entry_names(layer_types()), "layer type"));
  r.set_what(config::with_article(layer.type->name) + " layer");
  // "'units' belongs to Dense layers" for a key of another layer type.
  r.expect_keys(config::declared_keys({"type", "name"}, layer.type->keys),
                [](const std::string& key) { return config::entry_key_note(layer_types(), "layers", key); });
  layer.name = r.get_string("name", "");
  layer.options = layer.type->read(r);
  r.finish();
  return layer;
}

std::vector<LayerSpec> read_layer_list(const config::Value& value, const char* if_empty) {
  if (!value.is_array()) value.fail(str("expected an array of layer objects, got ", value.describe()));
  if (value.size() == 0 && if_empty) value.fail(if_empty);
  std::vector<LayerSpec> layers;
  for (size_t i = 0; i < value.size(); ++i) layers.push_back(read_layer_spec(value.at(i)));
  return layers;
}

ModelSpec read_model_spec(const config::Value& value) {
  config::Section r(value, "the model section");
  if (r.find("keras_json")) {
    r.expect_keys({"keras_json"});
    const std::string file = r.require("keras_json").to_string();
    r.finish();
    // The Keras file becomes a model section of its own, read like one in a job file.
    const config::Document keras(keras_json_to_model_json(read_keras_file(file, value.context()), file),
                                 str(file, " (read as model.keras_json)"));
    ModelSpec model = read_model_spec(keras.root());
    model.keras_json = file;
    return model;
  }
  ModelSpec model;
  model.path = value.path().empty() ? "model" : value.path();
  r.expect_keys({"input_shape", "layers", "keras_json"});
  model.input_shape = r.require("input_shape").to_shape();
  model.layers = read_layer_list(r.require("layers", " (an array of layer objects)"),
                                 "the model needs at least one layer, got an empty array");
  std::vector<const LayerSpec*> top;
  for (const LayerSpec& l : model.layers) top.push_back(&l);
  std::map<std::string, std::string> names;  // explicit name -> path of its layer
  check_unique_names(r, top, names);
  r.finish();
  return model;
}

}  // namespace dtrain::nn
