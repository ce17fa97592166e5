// Implementation of keras_model.h on nlohmann/json: one rule table per Keras
// layer class (the options copied into dtrain's layer, and those accepted only
// at their "not used" value), the input shape, and the chain check for
// Functional models.
#include "nn/keras_model.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::nn {
namespace {

using Json = nlohmann::json;

// What one Keras layer class becomes.
struct KerasRule {
  std::vector<std::string> copied;             // options dtrain's layer takes under the same name
  std::map<std::string, Json> only_default;     // options accepted only at this value
  std::set<std::string> weight_initializers;    // initializer options, each checked against kInitializers
};

const std::map<std::string, std::string> kInitializers = {
    // option -> the Keras class dtrain's initial values follow
    {"kernel_initializer", "GlorotUniform"}, {"bias_initializer", "Zeros"},
    {"beta_initializer", "Zeros"},           {"gamma_initializer", "Ones"},
    {"moving_mean_initializer", "Zeros"},    {"moving_variance_initializer", "Ones"},
};

const std::map<std::string, KerasRule>& rules() {
  const Json null;
  static const std::map<std::string, KerasRule> table = {
      {"Dense", {{"units", "activation", "use_bias"}, {}, {"kernel_initializer", "bias_initializer"}}},
      {"Conv2D",
       {{"filters", "kernel_size", "strides", "padding", "activation", "use_bias"},
        {{"dilation_rate", Json::array({1, 1})}, {"groups", 1}},
        {"kernel_initializer", "bias_initializer"}}},
      {"MaxPooling2D", {{"pool_size", "strides", "padding"}, {}, {}}},
      {"AveragePooling2D", {{"pool_size", "strides", "padding"}, {}, {}}},
      {"GlobalAveragePooling2D", {{}, {{"keepdims", false}}, {}}},
      {"Flatten", {{}, {}, {}}},
      {"Dropout", {{"rate"}, {}, {}}},
      {"Activation", {{"activation"}, {}, {}}},
      {"BatchNormalization",
       {{"momentum", "epsilon", "center", "scale"},
        {{"renorm", false}, {"synchronized", false}},
        {"beta_initializer", "gamma_initializer", "moving_mean_initializer", "moving_variance_initializer"}}},
  };
  return table;
}

// Keys every layer config may hold and that say nothing dtrain must act on.
const std::set<std::string> kIgnored = {"name", "trainable", "dtype", "data_format", "seed", "noise_shape",
                                        "renorm_momentum", "renorm_clipping", "fused", "virtual_batch_size",
                                        "adjustment", "build_config"};

class Translator {
 public:
  explicit Translator(std::string file) : file_(std::move(file)) {}

  Json model(const Json& root) {
    if (!root.is_object() || !root.contains("class_name") || !root.contains("config"))
      fail("", "is not a Keras model: expected the JSON object model.to_json() writes, with 'class_name' and 'config'");
    const std::string cls = root["class_name"].is_string() ? root["class_name"].get<std::string>() : "";
    if (cls != "Sequential" && cls != "Functional" && cls != "Model")
      fail("class_name", str("'", cls, "' models are not read; save a Sequential or a Functional model"));
    const Json& config = root["config"];
    const Json layers = config.value("layers", Json::array());
    if (!layers.is_array() || layers.empty()) fail("config.layers", "has no layers");
    if (cls != "Sequential") check_chain(config, layers);

    Json out{{"layers", Json::array()}};
    Json input_shape;
    for (size_t i = 0; i < layers.size(); ++i) {
      const Json& layer = layers[i];
      where_ = str("config.layers[", i, "]");
      const std::string type = layer.value("class_name", "");
      const Json& options = layer.contains("config") ? layer["config"] : Json::object();
      where_ += str(" (", type, " '", options.value("name", ""), "')");
      if (type == "InputLayer") {
        if (i != 0) fail_here("an InputLayer after the first layer is not a linear model");
        input_shape = batch_shape(options, {"batch_shape", "batch_input_shape"});
        check_input_options(options);
        continue;
      }
      if (input_shape.is_null() && i == 0) {
        input_shape = batch_shape(options, {"batch_input_shape", "batch_shape"});
        if (input_shape.is_null() && layer.contains("build_config"))
          input_shape = batch_shape(layer["build_config"], {"input_shape"});
      }
      if (!input_shape.is_null() && rank_ == 0) rank_ = static_cast<int64_t>(input_shape.size());
      out["layers"].push_back(translate(type, options));
      if (type == "Flatten" || type == "GlobalAveragePooling2D") rank_ = 1;
    }
    if (input_shape.is_null()) input_shape = batch_shape(config, {"build_input_shape"});
    if (input_shape.is_null())
      fail("config.layers[0]", "gives no input shape (no InputLayer, batch_shape or build_input_shape): build the "
                               "model with keras.Input(shape=...) before to_json()");
    out["input_shape"] = input_shape;
    if (out["layers"].empty()) fail("config.layers", "has only an InputLayer");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ConfigError(str("model.keras_json: '", file_, "'", where.empty() ? "" : ": ", where, " ", what));
  }
  [[noreturn]] void fail_here(const std::string& what) const { fail(where_, what); }

  // The shape after the batch dimension of the first of `keys` present in `o`, or null.
  Json batch_shape(const Json& o, std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (!o.contains(key) || o[key].is_null()) continue;
      const Json& s = o[key];
      if (!s.is_array() || s.size() < 2) fail_here(str("has an unreadable ", key, ": ", s.dump()));
      Json shape = Json::array();
      for (size_t d = 1; d < s.size(); ++d) {
        if (!s[d].is_number_integer()) fail_here(str(key, " ", s.dump(), " has an unknown dimension; dtrain needs every "
                                                     "dimension but the batch"));
        shape.push_back(s[d]);
      }
      return shape;
    }
    return nullptr;
  }

  void check_input_options(const Json& o) const {
    for (const auto& [key, value] : o.items()) {
      if (key == "batch_shape" || key == "batch_input_shape" || key == "name" || key == "dtype") continue;
      if ((key == "sparse" || key == "ragged" || key == "optional") && value == false) continue;
      if (value.is_null()) continue;
      fail_here(str("option '", key, "' = ", value.dump(), " is not supported"));
    }
    check_dtype(o);
  }

  void check_dtype(const Json& o) const {
    if (!o.contains("dtype") || o["dtype"].is_null()) return;
    const Json& d = o["dtype"];
    const std::string name = d.is_string() ? d.get<std::string>()
                             : d.is_object() && d.contains("config") ? d["config"].value("name", "")
                                                                     : std::string("?");
    if (name != "float32")
      fail_here(str("dtype '", name, "' is not supported: dtrain's layers compute in float32"));
  }

  void check_initializer(const std::string& key, const Json& value) const {
    if (value.is_null()) return;
    const std::string want = kInitializers.at(key);
    const std::string got = value.is_string() ? value.get<std::string>() : value.value("class_name", "?");
    // The class name ("GlorotUniform") or its string form ("glorot_uniform").
    auto folded = [](const std::string& name) {
      std::string out;
      for (char c : name)
        if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return out;
    };
    if (folded(got) != folded(want))
      fail_here(str("option '", key, "' is ", got, "; dtrain initialises it as ", want, " only"));
  }

  Json translate(const std::string& type, const Json& options) {
    const auto rule = rules().find(type);
    if (rule == rules().end()) {
      std::vector<std::string> known;
      for (const auto& [name, r] : rules()) known.push_back(name);
      fail_here(str("layer type '", type, "' is not supported; dtrain has: ", join(known, ", "), " (and InputLayer)"));
    }
    const KerasRule& r = rule->second;
    if (options.contains("trainable") && options["trainable"] == false)
      fail_here("is frozen (trainable false); dtrain trains every layer");
    check_dtype(options);
    if (options.contains("data_format") && !options["data_format"].is_null() &&
        options["data_format"] != "channels_last")
      fail_here(str("data_format ", options["data_format"].dump(), " is not supported: dtrain is channels_last"));
    Json layer{{"type", type}};
    if (options.contains("name") && options["name"].is_string()) layer["name"] = options["name"];
    for (const auto& [key, value] : options.items()) {
      if (std::find(r.copied.begin(), r.copied.end(), key) != r.copied.end()) {
        layer[key] = value;
      } else if (r.weight_initializers.count(key)) {
        check_initializer(key, value);
      } else if (const auto d = r.only_default.find(key); d != r.only_default.end()) {
        if (value != d->second)
          fail_here(str("option '", key, "' = ", value.dump(), " is not supported (only ", d->second.dump(), ")"));
      } else if (key == "batch_input_shape" || kIgnored.count(key) || value.is_null()) {
        // Said elsewhere, nothing to do, or an option that is not in use.
      } else {
        fail_here(str("option '", key, "' = ", value.dump(), " is not supported by dtrain's ", type));
      }
    }
    if (type == "BatchNormalization") check_batch_norm_axis(options);
    if (layer.contains("activation") && layer["activation"].is_object())
      fail_here(str("activation ", layer["activation"].dump(), " is not supported; use a built-in one by name"));
    return layer;
  }

  // Keras counts the batch axis: -1 (or [-1]) or the input's rank (the last axis
  // of (batch, ...)) are the channels; dtrain normalises over the last axis only.
  void check_batch_norm_axis(const Json& options) const {
    if (!options.contains("axis")) return;
    Json axis = options["axis"];
    if (axis.is_array() && axis.size() == 1) axis = axis[0];
    if (axis == -1 || (axis.is_number_integer() && axis.get<int64_t>() == rank_)) return;
    fail_here(str("axis ", options["axis"].dump(), " is not supported: dtrain normalises over the last (channels) axis"));
  }

  // A Functional model is read only when every layer takes the one before it.
  void check_chain(const Json& config, const Json& layers) {
    std::string previous;
    for (size_t i = 0; i < layers.size(); ++i) {
      const Json& layer = layers[i];
      const std::string name = layer.value("name", layer.contains("config") ? layer["config"].value("name", "") : "");
      where_ = str("config.layers[", i, "] (", layer.value("class_name", ""), " '", name, "')");
      const std::vector<std::string> inputs = inbound_names(layer.value("inbound_nodes", Json::array()));
      const bool first = i == 0;
      if ((first && !inputs.empty()) || (!first && (inputs.size() != 1 || inputs[0] != previous)))
        fail_here(str("takes ", inputs.empty() ? std::string("no input") : join(inputs, ", "),
                      first ? "" : str(", not just '", previous, "'"),
                      ": only Functional models whose layers form one chain (as a Sequential) are supported"));
      previous = name;
    }
    const Json outputs = config.value("output_layers", Json::array());
    if (inbound_names(outputs) != std::vector<std::string>{previous})
      fail("config.output_layers", str(outputs.dump(), " is not the last layer '", previous, "' alone"));
  }

  // The layer names an inbound_nodes entry refers to (tf-keras: [[["name", 0, 0, {}]]];
  // Keras 3: [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["name", 0, 0]}}]}]).
  static std::vector<std::string> inbound_names(const Json& nodes) {
    std::vector<std::string> names;
    std::function<void(const Json&)> visit = [&](const Json& j) {
      if (j.is_object()) {
        if (j.contains("keras_history") && j["keras_history"].is_array() && !j["keras_history"].empty())
          names.push_back(j["keras_history"][0].get<std::string>());
        for (const auto& [k, v] : j.items())
          if (k != "keras_history") visit(v);
      } else if (j.is_array()) {
        if (j.size() >= 3 && j[0].is_string() && j[1].is_number_integer() && j[2].is_number_integer()) {
          names.push_back(j[0].get<std::string>());
          return;
        }
        for (const Json& e : j) visit(e);
      }
    };
    visit(nodes);
    return names;
  }

  std::string file_;
  std::string where_;
  int64_t rank_ = 0;  // dimensions of the current layer's input, batch excluded (0: not known yet)
};

}  // namespace

std::string keras_json_to_model_json(const std::string& text, const std::string& file) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw ConfigError(str("model.keras_json: '", file, "' is not valid JSON (", e.what(),
                          "); it should be what Keras' model.to_json() wrote"));
  }
  return Translator(file).model(root).dump();
}

}  // namespace dtrain::nn
