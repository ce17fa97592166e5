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

// How a JSON value is shown in messages: its text, cut short ("[2,2]", "3", "null").
std::string shown(const Json& j) { return printable(j.dump(), 60); }

// "a number 3", "null", "an array [1,2]": what was found where something else belongs.
std::string described(const Json& j) {
  if (j.is_null()) return "null";
  const char* kind = j.is_object()    ? "an object "
                     : j.is_array()   ? "an array "
                     : j.is_string()  ? "a string "
                     : j.is_boolean() ? "a boolean "
                                      : "a number ";
  return str(kind, shown(j));
}

// o[key] when `o` is an object that holds `key`, else nullptr.
const Json* member(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

// A string field, for naming things: "" when absent or not a string.
std::string text_of(const Json* o, const char* key) {
  const Json* v = o ? member(*o, key) : nullptr;
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// Keras' inbound_nodes hold a few levels of lists and objects; deeper is not Keras'.
constexpr int kMaxNodeDepth = 32;

class Translator {
 public:
  explicit Translator(std::string file) : file_(std::move(file)) {}

  Json model(const Json& root) {
    if (!root.is_object() || !root.contains("class_name") || !root.contains("config"))
      fail("", "is not a Keras model: expected the JSON object model.to_json() writes, with 'class_name' and 'config'");
    const Json& class_name = root["class_name"];
    if (!class_name.is_string())
      fail("class_name", str("is ", described(class_name), "; expected the model's class, \"Sequential\" or \"Functional\""));
    const std::string cls = class_name.get<std::string>();
    if (cls != "Sequential" && cls != "Functional" && cls != "Model")
      fail("class_name", str("'", printable(cls), "' models are not read; save a Sequential or a Functional model"));
    const Json& config = root["config"];
    if (!config.is_object())
      fail("config", str("is ", described(config), ", not an object: the file is not what model.to_json() writes"));
    const Json* layers_json = member(config, "layers");
    if (layers_json && !layers_json->is_array())
      fail("config.layers", str("is ", described(*layers_json), ", not a list of layers"));
    if (!layers_json || layers_json->empty()) fail("config.layers", "has no layers");
    const Json& layers = *layers_json;
    for (size_t i = 0; i < layers.size(); ++i) {
      where_ = str("config.layers[", i, "]");
      const Json& layer = layers[i];
      if (!layer.is_object())
        fail_here(str("is ", described(layer),
                      ", not a layer object ({\"class_name\": ..., \"config\": {...}}, as model.to_json() writes)"));
      const Json* options = member(layer, "config");
      if (options && !options->is_null() && !options->is_object())
        fail_here(str("has a config that is ", described(*options), ", not an object of the layer's options"));
      const Json* type = member(layer, "class_name");
      if (!type || !type->is_string())
        fail_here(str("has ", type ? str("a class_name that is ", described(*type)) : std::string("no class_name"),
                      "; expected the layer's Keras class, such as \"Dense\""));
    }
    if (cls != "Sequential") check_chain(config, layers);

    Json out{{"layers", Json::array()}};
    Json input_shape;
    for (size_t i = 0; i < layers.size(); ++i) {
      const Json& layer = layers[i];
      where_ = str("config.layers[", i, "]");
      const std::string type = layer["class_name"].get<std::string>();
      const Json* options_json = member(layer, "config");
      const Json& options = options_json && options_json->is_object() ? *options_json : empty_object();
      where_ += str(" (", printable(type), " '", printable(text_of(&options, "name")), "')");
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
  static const Json& empty_object() {
    static const Json empty = Json::object();
    return empty;
  }

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ConfigError(str("model.keras_json: '", printable(file_, 256), "'", where.empty() ? "" : ": ", where, " ", what));
  }
  [[noreturn]] void fail_here(const std::string& what) const { fail(where_, what); }

  // The shape after the batch dimension of the first of `keys` present in `o`, or null.
  Json batch_shape(const Json& o, std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      const Json* found = member(o, key);
      if (!found || found->is_null()) continue;
      const Json& s = *found;
      if (!s.is_array() || s.size() < 2) fail_here(str("has an unreadable ", key, ": ", shown(s)));
      Json shape = Json::array();
      for (size_t d = 1; d < s.size(); ++d) {
        if (!s[d].is_number_integer()) fail_here(str(key, " ", shown(s), " has an unknown dimension; dtrain needs every "
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
      fail_here(str("option '", printable(key), "' = ", shown(value), " is not supported"));
    }
    check_dtype(o);
  }

  void check_dtype(const Json& o) const {
    const Json* d = member(o, "dtype");
    if (!d || d->is_null()) return;
    // "float32", or Keras 3's {"class_name": "DTypePolicy", "config": {"name": "float32"}}.
    const std::string name = d->is_string() ? d->get<std::string>() : text_of(member(*d, "config"), "name");
    if (name != "float32")
      fail_here(str("dtype '", name.empty() ? shown(*d) : printable(name),
                    "' is not supported: dtrain's layers compute in float32"));
  }

  void check_initializer(const std::string& key, const Json& value) const {
    if (value.is_null()) return;
    const std::string want = kInitializers.at(key);
    // The class name ("GlorotUniform"), its string form ("glorot_uniform"), or
    // {"class_name": "GlorotUniform", ...}.
    std::string got = value.is_string() ? value.get<std::string>() : text_of(&value, "class_name");
    if (got.empty()) got = shown(value);
    auto folded = [](const std::string& name) {
      std::string out;
      for (char c : name)
        if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return out;
    };
    if (folded(got) != folded(want))
      fail_here(str("option '", key, "' is ", printable(got), "; dtrain initialises it as ", want, " only"));
  }

  Json translate(const std::string& type, const Json& options) {
    const auto rule = rules().find(type);
    if (rule == rules().end()) {
      std::vector<std::string> known;
      for (const auto& [name, r] : rules()) known.push_back(name);
      fail_here(str("layer type '", printable(type), "' is not supported; dtrain has: ", join(known, ", "),
                    " (and InputLayer)"));
    }
    const KerasRule& r = rule->second;
    if (options.contains("trainable") && options["trainable"] == false)
      fail_here("is frozen (trainable false); dtrain trains every layer");
    check_dtype(options);
    if (options.contains("data_format") && !options["data_format"].is_null() &&
        options["data_format"] != "channels_last")
      fail_here(str("data_format ", shown(options["data_format"]), " is not supported: dtrain is channels_last"));
    Json layer{{"type", type}};
    if (options.contains("name") && options["name"].is_string()) layer["name"] = options["name"];
    for (const auto& [key, value] : options.items()) {
      if (std::find(r.copied.begin(), r.copied.end(), key) != r.copied.end()) {
        layer[key] = value;
      } else if (r.weight_initializers.count(key)) {
        check_initializer(key, value);
      } else if (const auto d = r.only_default.find(key); d != r.only_default.end()) {
        if (value != d->second)
          fail_here(str("option '", key, "' = ", shown(value), " is not supported (only ", d->second.dump(), ")"));
      } else if (key == "batch_input_shape" || kIgnored.count(key) || value.is_null()) {
        // Said elsewhere, nothing to do, or an option that is not in use.
      } else {
        fail_here(str("option '", printable(key), "' = ", shown(value), " is not supported by dtrain's ", type));
      }
    }
    if (type == "BatchNormalization") check_batch_norm_axis(options);
    if (layer.contains("activation") && layer["activation"].is_object())
      fail_here(str("activation ", shown(layer["activation"]), " is not supported; use a built-in one by name"));
    return layer;
  }

  // Keras counts the batch axis: -1 (or [-1]) or the input's rank (the last axis
  // of (batch, ...)) are the channels; dtrain normalises over the last axis only.
  void check_batch_norm_axis(const Json& options) const {
    if (!options.contains("axis")) return;
    Json axis = options["axis"];
    if (axis.is_array() && axis.size() == 1) axis = axis[0];
    if (axis == -1 || (axis.is_number_integer() && axis.get<int64_t>() == rank_)) return;
    fail_here(str("axis ", shown(options["axis"]), " is not supported: dtrain normalises over the last (channels) axis"));
  }

  // A Functional model is read only when every layer takes the one before it
  // (`layers` are objects with a string class_name, checked by model()).
  void check_chain(const Json& config, const Json& layers) {
    std::string previous;
    for (size_t i = 0; i < layers.size(); ++i) {
      const Json& layer = layers[i];
      std::string name = text_of(&layer, "name");
      if (name.empty()) name = text_of(member(layer, "config"), "name");
      where_ = str("config.layers[", i, "] (", printable(layer["class_name"].get<std::string>()), " '", printable(name),
                   "')");
      const Json* nodes = member(layer, "inbound_nodes");
      const std::vector<std::string> inputs = nodes ? inbound_names(*nodes) : std::vector<std::string>{};
      const bool first = i == 0;
      if ((first && !inputs.empty()) || (!first && (inputs.size() != 1 || inputs[0] != previous))) {
        std::vector<std::string> shown_inputs;
        for (const std::string& input : inputs) shown_inputs.push_back(printable(input));
        fail_here(str("takes ", inputs.empty() ? std::string("no input") : join(shown_inputs, ", "),
                      first ? "" : str(", not just '", printable(previous), "'"),
                      ": only Functional models whose layers form one chain (as a Sequential) are supported"));
      }
      previous = name;
    }
    const Json* outputs = member(config, "output_layers");
    if (inbound_names(outputs ? *outputs : Json::array()) != std::vector<std::string>{previous})
      fail("config.output_layers",
           str(outputs ? shown(*outputs) : std::string("(none)"), " is not the last layer '", printable(previous),
               "' alone"));
  }

  // The layer names an inbound_nodes entry refers to (tf-keras: [[["name", 0, 0, {}]]];
  // Keras 3: [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["name", 0, 0]}}]}]).
  // A reference whose name is not a string is named by its JSON text.
  std::vector<std::string> inbound_names(const Json& nodes) const {
    std::vector<std::string> names;
    std::function<void(const Json&, int)> visit = [&](const Json& j, int depth) {
      if (depth > kMaxNodeDepth)
        fail_here(str("has inbound_nodes nested deeper than ", kMaxNodeDepth,
                      " levels, which is not what Keras writes"));
      if (j.is_object()) {
        if (const Json* h = member(j, "keras_history"); h && h->is_array() && !h->empty())
          names.push_back((*h)[0].is_string() ? (*h)[0].get<std::string>() : (*h)[0].dump());
        for (const auto& [k, v] : j.items())
          if (k != "keras_history") visit(v, depth + 1);
      } else if (j.is_array()) {
        if (j.size() >= 3 && j[0].is_string() && j[1].is_number_integer() && j[2].is_number_integer()) {
          names.push_back(j[0].get<std::string>());
          return;
        }
        for (const Json& e : j) visit(e, depth + 1);
      }
    };
    visit(nodes, 0);
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
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    std::string message = e.what();
    const size_t bracket = message.find("] ");
    if (bracket != std::string::npos) message = message.substr(bracket + 2);
    throw ConfigError(str("model.keras_json: '", printable(file, 256), "' is not valid JSON (", printable(message, 200),
                          "); it should be what Keras' model.to_json() wrote"));
  }
  return Translator(file).model(root).dump();
}

}  // namespace dtrain::nn
