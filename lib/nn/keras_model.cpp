// Implementation of keras_model.h on nlohmann/json: one rule table per Keras
// layer class (the options copied into dtrain's layer, and those accepted only
// at their "not used" value), the input shape, the call options
// (MultiHeadAttention's use_causal_mask), and Functional models' graphs through
// keras_graph.h.
#include "nn/keras_model.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/strings.h"
#include "nn/keras_graph.h"

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
    {"embeddings_initializer", "RandomUniform"}, {"initializer", "GlorotUniform"},
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
      {"Embedding", {{"input_dim", "output_dim"}, {{"mask_zero", false}}, {"embeddings_initializer"}}},
      {"PositionEmbedding", {{"sequence_length"}, {}, {"initializer"}}},
      {"LayerNormalization",
       {{"epsilon", "center", "scale"}, {{"rms_scaling", false}}, {"beta_initializer", "gamma_initializer"}}},
      {"MultiHeadAttention",
       {{"num_heads", "key_dim", "value_dim", "dropout", "use_bias", "output_shape"},
        {{"use_gate", false}, {"softmax_robust_masking", false}},
        {"kernel_initializer", "bias_initializer"}}},
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
                                        "adjustment", "build_config", "input_length", "attention_axes",
                                        "query_shape", "key_shape", "value_shape"};

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

    Json out{{"layers", Json::array()}};
    if (cls == "Sequential") {
      for (size_t i = 0; i < layers.size(); ++i) add_layer(layers, i, out["layers"]);
    } else {
      add_items(keras::read_functional_graph(config, layers, str("model.keras_json: '", printable(file_, 256), "'")),
                layers, out["layers"]);
    }
    if (input_shape_.is_null()) input_shape_ = batch_shape(config, {"build_input_shape"});
    if (input_shape_.is_null())
      fail("config.layers[0]", "gives no input shape (no InputLayer, batch_shape or build_input_shape): build the "
                               "model with keras.Input(shape=...) before to_json()");
    out["input_shape"] = input_shape_;
    if (out["layers"].empty()) fail("config.layers", "has only an InputLayer");
    const std::string first = out["layers"][0]["type"].get<std::string>();
    if (token_input_ && first != "Embedding")
      fail("config.layers[0]", str("takes integer token ids, but the model starts with ", first,
                                   "; dtrain reads token ids into an Embedding first"));
    return out;
  }

 private:
  // config.layers[i] as dtrain's layer, appended to `out` (an InputLayer only gives the input shape).
  void add_layer(const Json& layers, size_t i, Json& out) {
    const Json& layer = layers[i];
    where_ = str("config.layers[", i, "]");
    const std::string type = layer["class_name"].get<std::string>();
    const Json* options_json = member(layer, "config");
    const Json& options = options_json && options_json->is_object() ? *options_json : empty_object();
    where_ += str(" (", printable(type), " '", printable(text_of(&options, "name")), "')");
    if (type == "InputLayer") {
      if (i != 0) fail_here("an InputLayer after the first layer is not a linear model");
      input_shape_ = batch_shape(options, {"batch_shape", "batch_input_shape"});
      check_input_options(options);
      return;
    }
    if (type == "Add") fail_here("an Add joins two tensors: only a Functional model has one");
    if (input_shape_.is_null() && i == 0) {
      input_shape_ = batch_shape(options, {"batch_input_shape", "batch_shape"});
      if (input_shape_.is_null() && layer.contains("build_config"))
        input_shape_ = batch_shape(layer["build_config"], {"input_shape"});
    }
    if (!input_shape_.is_null() && rank_ == 0) rank_ = static_cast<int64_t>(input_shape_.size());
    Json translated = translate(type, options);
    check_call(type, keras::call_kwargs(layer), translated);
    out.push_back(std::move(translated));
    if (type == "Flatten" || type == "GlobalAveragePooling2D") rank_ = 1;
    if (type == "Embedding") ++rank_;
  }

  // A Functional model's steps: layers, and Residual blocks (named as the Add that closes them).
  void add_items(const std::vector<keras::GraphItem>& items, const Json& layers, Json& out) {
    for (const keras::GraphItem& item : items) {
      if (!item.residual) {
        add_layer(layers, item.layer, out);
        continue;
      }
      where_ = str("config.layers[", item.layer, "] (Add '", printable(keras::layer_name(layers[item.layer])), "')");
      const Json* options = member(layers[item.layer], "config");
      if (options) check_add_options(*options);
      Json block{{"type", "Residual"}, {"name", keras::layer_name(layers[item.layer])}, {"layers", Json::array()}};
      const int64_t rank = rank_;
      add_items(item.layers, layers, block["layers"]);
      const int64_t rank_after = rank_;
      rank_ = rank;
      if (!item.shortcut.empty()) {
        block["shortcut"] = Json::array();
        add_items(item.shortcut, layers, block["shortcut"]);
      }
      rank_ = rank_after;
      out.push_back(std::move(block));
    }
  }

  void check_add_options(const Json& o) const {
    if (!o.is_object()) return;
    for (const auto& [key, value] : o.items())
      if (key != "name" && key != "trainable" && key != "dtype" && !value.is_null())
        fail_here(str("option '", printable(key), "' = ", shown(value), " is not supported by dtrain's Residual"));
    check_dtype(o);
  }

  // The options the layer was called with: MultiHeadAttention's use_causal_mask becomes
  // its option; the query, key and value tensors were checked by the graph; anything
  // else only at a value that changes nothing.
  void check_call(const std::string& type, const Json& kwargs, Json& layer) const {
    for (const auto& [key, value] : kwargs.items()) {
      if (type == "MultiHeadAttention" && key == "use_causal_mask" && value.is_boolean()) {
        layer["use_causal_mask"] = value;
      } else if (type == "MultiHeadAttention" && (key == "query" || key == "value" || key == "key")) {
        // The input tensors, one and the same (keras_graph.cpp checked it).
      } else if (!value.is_null() && value != false) {
        fail_here(str("is called with '", printable(key), "' = ", shown(value), ", which dtrain does not support"));
      }
    }
  }

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

  // The InputLayer's options: its dtype is float32, or an integer type for token ids.
  void check_input_options(const Json& o) {
    for (const auto& [key, value] : o.items()) {
      if (key == "batch_shape" || key == "batch_input_shape" || key == "name" || key == "dtype") continue;
      if ((key == "sparse" || key == "ragged" || key == "optional") && value == false) continue;
      if (value.is_null()) continue;
      fail_here(str("option '", printable(key), "' = ", shown(value), " is not supported"));
    }
    const Json* d = member(o, "dtype");
    token_input_ = d && (*d == "int32" || *d == "int64");
    if (!token_input_) check_dtype(o);
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
    // Keras' string "uniform" is RandomUniform at its defaults.
    if (folded(got) != folded(want) && !(folded(got) == "uniform" && want == "RandomUniform"))
      fail_here(str("option '", key, "' is ", printable(got), "; dtrain initialises it as ", want, " only"));
    if (want == "RandomUniform") check_uniform_range(key, value);
  }

  // RandomUniform's bounds, when given, are Keras' defaults, the ones dtrain draws from.
  void check_uniform_range(const std::string& key, const Json& value) const {
    const Json* config = member(value, "config");
    for (const auto& [bound, expected] : {std::pair<const char*, double>{"minval", -0.05}, {"maxval", 0.05}}) {
      const Json* v = config ? member(*config, bound) : nullptr;
      if (v && !(v->is_number() && v->get<double>() == expected))
        fail_here(str("option '", key, "' has ", bound, " ", shown(*v), "; dtrain draws U(-0.05, 0.05) only"));
    }
  }

  Json translate(const std::string& type, const Json& options) {
    const auto rule = rules().find(type);
    if (rule == rules().end()) {
      std::vector<std::string> known;
      for (const auto& [name, r] : rules()) known.push_back(name);
      fail_here(str("layer type '", printable(type), "' is not supported; dtrain has: ", join(known, ", "),
                    " (and InputLayer; Add where it closes a residual block of a Functional model)"));
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
        if (value.is_null()) continue;  // Keras' "the default" (value_dim, output_shape)
        layer[key] = value;
      } else if (r.weight_initializers.count(key)) {
        check_initializer(key, value);
      } else if (const auto d = r.only_default.find(key); d != r.only_default.end()) {
        if (value != d->second)
          fail_here(str("option '", key, "' = ", shown(value), " is not supported (only ", d->second.dump(), ")"));
      } else if (key == "batch_input_shape" || kIgnored.count(key) || value.is_null() ||
                 (key == "axis" && (type == "BatchNormalization" || type == "LayerNormalization"))) {
        // Said elsewhere (the axis: check_last_axis), nothing to do, or an option that is not in use.
      } else {
        fail_here(str("option '", printable(key), "' = ", shown(value), " is not supported by dtrain's ", type));
      }
    }
    if (type == "BatchNormalization" || type == "LayerNormalization") check_last_axis(options);
    if (type == "MultiHeadAttention") check_attention_axes(options);
    if (layer.contains("activation") && layer["activation"].is_object())
      fail_here(str("activation ", shown(layer["activation"]), " is not supported; use a built-in one by name"));
    return layer;
  }

  // MultiHeadAttention attends over the time axis of (batch, time, features):
  // attention_axes null (Keras' default) or [1].
  void check_attention_axes(const Json& options) const {
    const Json* axes = member(options, "attention_axes");
    if (!axes || axes->is_null() || *axes == 1 || *axes == Json::array({1})) return;
    fail_here(str("attention_axes ", shown(*axes), " is not supported: dtrain attends over the time axis, [1]"));
  }

  // Keras counts the batch axis: -1 (or [-1]) or the input's rank (the last axis
  // of (batch, ...)) are the channels; dtrain normalises over the last axis only.
  void check_last_axis(const Json& options) const {
    if (!options.contains("axis")) return;
    Json axis = options["axis"];
    if (axis.is_array() && axis.size() == 1) axis = axis[0];
    if (axis == -1 || (axis.is_number_integer() && axis.get<int64_t>() == rank_)) return;
    fail_here(str("axis ", shown(options["axis"]), " is not supported: dtrain normalises over the last (channels) axis"));
  }

  std::string file_;
  std::string where_;
  int64_t rank_ = 0;  // dimensions of the current layer's input, batch excluded (0: not known yet)
  Json input_shape_;   // the shape after the batch dimension, once found
  bool token_input_ = false;  // the InputLayer holds integers: token ids
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
