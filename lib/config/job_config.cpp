// Implementation of job_config.h: the job schema, read with ObjectReader.
//
// parse_job_config() parses the text, applies the --set overrides to the JSON, then
// reads each top-level section with its own function below. Each function first
// declares the keys its object may hold (expect_keys: unknown keys are reported
// before anything else), then reads them, filling defaults for absent keys and
// checking types and ranges; finish() checks that the declared keys and the reading
// code agree. The tables of keys per type (layer type, optimizer, data format,
// schedule) give both the declarations and the notes for a key that belongs to
// another type ("'files' belongs to cifar10 sources"). The cluster, task and
// rpc_layer keys (TF_CONFIG's shape) and the runtime section are read by
// cluster_reader.cpp. normalized_json is the overridden JSON dumped with sorted keys;
// agreement_json is the same without what may differ between the tasks of one job.
#include "config/job_config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "config/cluster_reader.h"
#include "config/json_reader.h"
#include "config/overrides.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

using Names = std::vector<std::string>;
// Type name -> the keys of that type beyond the common ones ("type", "name", ...).
using KeyTable = std::vector<std::pair<std::string, Names>>;

const Names kLayerTypes = {
    "Dense",   "Conv2D",  "MaxPooling2D",       "AveragePooling2D", "GlobalAveragePooling2D",
    "Flatten", "Dropout", "BatchNormalization", "Activation", "Residual"};
const Names kActivations = {"relu", "sigmoid", "tanh", "softmax", "linear"};
const Names kPaddings = {"valid", "same"};
const Names kLosses = {"sparse_categorical_crossentropy", "categorical_crossentropy", "mse"};
const Names kOptimizers = {"sgd", "adam", "adamw"};
const Names kSchedules = {"constant", "step", "cosine"};
const Names kFormats = {"idx", "cifar10", "synthetic"};
const Names kStrategies = {"one_device", "mirrored", "multi_worker_mirrored", "central_storage",
                           "parameter_server"};
const Names kAvailableStrategies = {"one_device", "mirrored", "multi_worker_mirrored"};
const Names kCommunications = {"auto", "ring", "nccl"};
const Names kShardPolicies = {"auto", "data", "file", "off"};

const KeyTable kLayerKeys = {
    {"Dense", {"units", "activation", "use_bias"}},
    {"Conv2D", {"filters", "kernel_size", "strides", "padding", "activation", "use_bias"}},
    {"MaxPooling2D", {"pool_size", "strides", "padding"}},
    {"AveragePooling2D", {"pool_size", "strides", "padding"}},
    {"GlobalAveragePooling2D", {}},
    {"Flatten", {}},
    {"Dropout", {"rate"}},
    {"BatchNormalization", {"momentum", "epsilon", "center", "scale", "axis"}},
    {"Activation", {"activation"}},
    {"Residual", {"layers", "shortcut", "activation"}},
};
const KeyTable kOptimizerKeys = {
    {"sgd", {"momentum", "nesterov"}},
    {"adam", {"beta_1", "beta_2", "epsilon"}},
    {"adamw", {"beta_1", "beta_2", "epsilon", "weight_decay"}},
};
const KeyTable kScheduleKeys = {{"constant", {}},
                                {"step", {"decay_steps", "decay_rate"}},
                                {"cosine", {"decay_steps", "alpha"}}};
const KeyTable kSourceKeys = {{"idx", {"images", "labels", "rescale"}},
                              {"cifar10", {"files", "rescale"}},
                              {"synthetic", {"shape", "count", "classes", "seed"}}};

// common + the keys of `type` in `table`.
Names keys_for(Names common, const KeyTable& table, const std::string& type,
               const Names& tail = {}) {
  for (const auto& [name, keys] : table)
    if (name == type) common.insert(common.end(), keys.begin(), keys.end());
  common.insert(common.end(), tail.begin(), tail.end());
  return common;
}

// "a Dense layer", "an idx source".
std::string with_article(const std::string& word) {
  const bool vowel = !word.empty() && std::strchr("aeiouAEIOU", word[0]) != nullptr;
  return str(vowel ? "an " : "a ", word);
}

// "a", "a and b", "a, b and c".
std::string join_and(const Names& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

// An expect_keys() note: "'units' belongs to Dense layers" when `key` is another type's.
std::function<std::string(const std::string&)> owner_note(const KeyTable& table,
                                                          const std::string& plural) {
  return [&table, plural](const std::string& key) {
    Names owners;
    for (const auto& [type, keys] : table)
      for (const auto& k : keys)
        if (k == key) owners.push_back(type);
    return owners.empty() ? std::string()
                          : str("'", key, "' belongs to ", join_and(owners), " ", plural);
  };
}

std::string read_activation(const Context& ctx, const Json& value, const std::string& path) {
  if (value.is_null()) return "linear";  // Keras: activation=None
  return read_choice(ctx, value, path, kActivations, "activation");
}

// Reads the optional "activation" key of `r` into `layer`.
void get_activation(ObjectReader& r, LayerSpec& layer) {
  if (const Json* value = r.find("activation"))
    layer.activation = read_activation(r.context(), *value, r.path_of("activation"));
}

void read_pooling(ObjectReader& r, LayerSpec& layer) {
  r.get_pair("pool_size", layer.pool_size);
  layer.strides[0] = layer.pool_size[0];  // Keras: strides default to pool_size
  layer.strides[1] = layer.pool_size[1];
  const Json* strides = r.find("strides");
  if (strides && !strides->is_null())
    read_pair(r.context(), *strides, r.path_of("strides"), layer.strides);
  layer.padding = r.get_choice("padding", "valid", kPaddings, "padding");
}

void read_batch_norm(ObjectReader& r, LayerSpec& layer) {
  layer.momentum = r.get_double("momentum", layer.momentum, kFraction);
  layer.epsilon = r.get_double("epsilon", layer.epsilon, kPositive);
  layer.center = r.get_bool("center", layer.center);
  layer.scale = r.get_bool("scale", layer.scale);
  if (const Json* axis = r.find("axis")) {
    const std::string path = r.path_of("axis");
    if (!axis->is_number_integer())
      r.context().fail(path, str("expected -1 (the channels axis), got ", describe(*axis)));
    if (axis->get<int64_t>() != -1)
      r.context().fail(path, str("only the channels axis -1 is supported (dtrain's tensors are "
                                 "channels-last), got ",
                                 show(*axis), "; remove 'axis' or set it to -1"));
  }
}

LayerSpec read_layer(const Context& ctx, const Json& value, const std::string& path);

// Reads an array of layer objects at `path`. An empty array fails with
// `if_empty`, or is allowed when that is null (a Residual's identity shortcut).
std::vector<LayerSpec> read_layer_list(const Context& ctx, const Json& value, const std::string& path,
                                       const char* if_empty) {
  if (!value.is_array())
    ctx.fail(path, str("expected an array of layer objects, got ", describe(value)));
  if (value.empty() && if_empty) ctx.fail(path, if_empty);
  std::vector<LayerSpec> layers;
  for (size_t i = 0; i < value.size(); ++i) layers.push_back(read_layer(ctx, value[i], index_path(path, i)));
  return layers;
}

// Fails when an explicit layer name is used twice, anywhere in the model
// (Residual blocks included); `names` maps each name to its layer's path.
void check_unique_names(const Context& ctx, const std::vector<LayerSpec>& layers,
                        std::map<std::string, std::string>& names) {
  for (const LayerSpec& layer : layers) {
    if (!layer.name.empty()) {
      const auto [it, added] = names.emplace(layer.name, layer.path);
      if (!added)
        ctx.fail(child_path(layer.path, "name"),
                 str("the name '", layer.name, "' is already used by ", it->second,
                     "; layer names must be unique"));
    }
    check_unique_names(ctx, layer.layers, names);
    check_unique_names(ctx, layer.shortcut, names);
  }
}

LayerSpec read_layer(const Context& ctx, const Json& value, const std::string& path) {
  if (!value.is_object())
    ctx.fail(path, str("expected a layer object such as {\"type\": \"Dense\", \"units\": 10}, got ",
                       describe(value)));
  ObjectReader r(ctx, value, path, "a layer");
  LayerSpec layer;
  layer.path = path;
  layer.type = r.require_choice("type", kLayerTypes, "layer type");
  r.set_what(with_article(layer.type) + " layer");
  r.expect_keys(keys_for({"type", "name"}, kLayerKeys, layer.type),
                owner_note(kLayerKeys, "layers"));
  layer.name = r.get_string("name", "");
  const std::string& type = layer.type;
  if (type == "Dense") {
    layer.units = r.require_int("units", 1);
    get_activation(r, layer);
    layer.use_bias = r.get_bool("use_bias", layer.use_bias);
  } else if (type == "Conv2D") {
    layer.filters = r.require_int("filters", 1);
    read_pair(ctx, r.require("kernel_size", " (a positive integer or [height, width])"),
              r.path_of("kernel_size"), layer.kernel_size);
    r.get_pair("strides", layer.strides);
    layer.padding = r.get_choice("padding", "valid", kPaddings, "padding");
    get_activation(r, layer);
    layer.use_bias = r.get_bool("use_bias", layer.use_bias);
  } else if (type == "MaxPooling2D" || type == "AveragePooling2D") {
    read_pooling(r, layer);
  } else if (type == "Dropout") {
    layer.rate = r.require_double("rate", kFraction);
  } else if (type == "BatchNormalization") {
    read_batch_norm(r, layer);
  } else if (type == "Activation") {
    layer.activation = read_activation(
        ctx, r.require("activation", str(" (one of ", join(kActivations, ", "), ")")),
        r.path_of("activation"));
  } else if (type == "Residual") {
    layer.layers = read_layer_list(ctx, r.require("layers", " (the block's layers, an array of layer objects)"),
                                   r.path_of("layers"),
                                   "a Residual block needs at least one layer, got an empty array");
    if (const Json* shortcut = r.find("shortcut"))
      layer.shortcut = read_layer_list(ctx, *shortcut, r.path_of("shortcut"), /*if_empty=*/nullptr);
    get_activation(r, layer);
  }  // GlobalAveragePooling2D and Flatten take no other keys.
  r.finish();
  return layer;
}

ModelSpec read_model(const Context& ctx, const Json& value) {
  ModelSpec model;
  ObjectReader r(ctx, value, model.path, "the model section");
  r.expect_keys({"input_shape", "layers"});
  model.input_shape = read_shape(ctx, r.require("input_shape"), r.path_of("input_shape"));
  model.layers = read_layer_list(ctx, r.require("layers", " (an array of layer objects)"), r.path_of("layers"),
                                 "the model needs at least one layer, got an empty array");
  std::map<std::string, std::string> names;  // explicit name -> path of its layer
  check_unique_names(ctx, model.layers, names);
  r.finish();
  return model;
}

LossSpec read_loss(const Context& ctx, const Json& value) {
  LossSpec loss;
  if (value.is_string()) {
    loss.type = read_choice(ctx, value, loss.path, kLosses, "loss");
    return loss;
  }
  if (!value.is_object())
    ctx.fail(loss.path, str("expected a loss name (one of ", join(kLosses, ", "),
                            ") or an object such as {\"type\": \"mse\"}, got ", describe(value)));
  ObjectReader r(ctx, value, loss.path, "the loss");
  loss.type = r.require_choice("type", kLosses, "loss");
  r.set_what(str("the ", loss.type, " loss"));
  const bool crossentropy = loss.type != "mse";
  r.expect_keys(crossentropy ? Names{"type", "from_logits"} : Names{"type"},
                [](const std::string& key) {
                  return key == "from_logits"
                             ? std::string("from_logits applies only to the crossentropy losses")
                             : std::string();
                });
  if (crossentropy) loss.from_logits = r.get_bool("from_logits", loss.from_logits);
  r.finish();
  return loss;
}

LearningRateSpec read_learning_rate(const Context& ctx, const Json& value,
                                    const std::string& path) {
  LearningRateSpec lr;
  lr.path = path;
  if (value.is_number()) {
    lr.initial_learning_rate = read_double(ctx, value, path, kPositive);
    return lr;
  }
  if (!value.is_object())
    ctx.fail(path, str("expected a positive number or a schedule such as {\"type\": \"cosine\", "
                       "\"initial_learning_rate\": 0.1, \"decay_steps\": 1000}, got ",
                       describe(value)));
  ObjectReader r(ctx, value, path, "a learning-rate schedule");
  lr.type = r.require_choice("type", kSchedules, "learning-rate schedule");
  r.set_what(str("a ", lr.type, " learning-rate schedule"));
  r.expect_keys(
      keys_for({"type", "initial_learning_rate"}, kScheduleKeys, lr.type, {"warmup_steps"}),
      owner_note(kScheduleKeys, "schedules"));
  lr.initial_learning_rate = r.require_double("initial_learning_rate", kPositive);
  if (lr.type != "constant") lr.decay_steps = r.require_int("decay_steps", 1);
  if (lr.type == "step") lr.decay_rate = r.get_double("decay_rate", lr.decay_rate, kPositive);
  if (lr.type == "cosine") lr.alpha = r.get_double("alpha", lr.alpha, kUnitInterval);
  lr.warmup_steps = r.get_int("warmup_steps", lr.warmup_steps, 0);
  r.finish();
  return lr;
}

OptimizerSpec read_optimizer(const Context& ctx, const Json& value) {
  OptimizerSpec opt;
  opt.learning_rate.path = child_path(opt.path, "learning_rate");
  auto default_lr = [&opt] { return opt.type == "sgd" ? 0.01 : 0.001; };
  if (value.is_string()) {
    opt.type = read_choice(ctx, value, opt.path, kOptimizers, "optimizer");
    opt.learning_rate.initial_learning_rate = default_lr();
    return opt;
  }
  if (!value.is_object())
    ctx.fail(opt.path, str("expected an optimizer name (one of ", join(kOptimizers, ", "),
                           ") or an object such as {\"type\": \"adam\", \"learning_rate\": 0.001},"
                           " got ",
                           describe(value)));
  ObjectReader r(ctx, value, opt.path, "the optimizer");
  opt.type = r.require_choice("type", kOptimizers, "optimizer");
  r.set_what(str("the ", opt.type, " optimizer"));
  r.expect_keys(keys_for({"type", "learning_rate"}, kOptimizerKeys, opt.type),
                owner_note(kOptimizerKeys, "optimizers"));
  if (const Json* lr = r.find("learning_rate"))
    opt.learning_rate = read_learning_rate(ctx, *lr, r.path_of("learning_rate"));
  else
    opt.learning_rate.initial_learning_rate = default_lr();
  if (opt.type == "sgd") {
    opt.momentum = r.get_double("momentum", opt.momentum, kFraction);
    opt.nesterov = r.get_bool("nesterov", opt.nesterov);
  } else {  // adam, adamw
    opt.beta_1 = r.get_double("beta_1", opt.beta_1, kFraction);
    opt.beta_2 = r.get_double("beta_2", opt.beta_2, kFraction);
    opt.epsilon = r.get_double("epsilon", opt.epsilon, kPositive);
    if (opt.type == "adamw")
      opt.weight_decay = r.get_double("weight_decay", opt.weight_decay, kNonNegative);
  }
  r.finish();
  return opt;
}

DataSourceSpec read_source(const Context& ctx, const Json& value, const std::string& path) {
  DataSourceSpec src;
  src.path = path;
  ObjectReader r(ctx, value, path, "a data source");
  src.format = r.require_choice("format", kFormats, "data format");
  r.set_what(with_article(src.format) + " source");
  r.expect_keys(keys_for({"format"}, kSourceKeys, src.format, {"take"}),
                owner_note(kSourceKeys, "sources"));
  if (src.format == "idx") {
    src.images = r.require_string("images");
    src.labels = r.require_string("labels");
  } else if (src.format == "cifar10") {
    src.files = read_string_list(ctx, r.require("files", " (an array of data_batch_*.bin files)"),
                                 r.path_of("files"));
  } else {  // synthetic
    src.shape = read_shape(ctx, r.require("shape", " (the sample shape, e.g. [28, 28, 1])"),
                           r.path_of("shape"));
    src.count = r.require_int("count", 1);
    src.classes = r.get_int("classes", src.classes, 2);
    src.seed = static_cast<uint64_t>(r.get_int("seed", 0, 0));
  }
  if (src.format != "synthetic") src.rescale = r.get_double("rescale", src.rescale, kPositive);
  src.take = r.get_int("take", src.take, 0);
  r.finish();
  return src;
}

// data.test may be null (no test set), which lets --set data.test=null drop it.
DataSpec read_data(const Context& ctx, const Json& value) {
  DataSpec data;
  ObjectReader r(ctx, value, data.path, "the data section");
  r.expect_keys({"train", "test", "shuffle_buffer", "prefetch", "drop_remainder", "cache", "shard_policy"});
  data.train =
      read_source(ctx, r.require("train", " (the training data source)"), r.path_of("train"));
  const Json* test = r.find("test");
  if (test && !test->is_null()) {
    data.has_test = true;
    data.test = read_source(ctx, *test, r.path_of("test"));
  }
  data.shuffle_buffer = r.get_int("shuffle_buffer", data.shuffle_buffer, 0);
  data.prefetch = r.get_int("prefetch", data.prefetch, 0);
  data.drop_remainder = r.get_bool("drop_remainder", data.drop_remainder);
  data.cache = r.get_bool("cache", data.cache);
  data.shard_policy = r.get_choice("shard_policy", data.shard_policy, kShardPolicies, "shard policy");
  r.finish();
  return data;
}

TrainSpec read_train(const Context& ctx, const Json& value) {
  TrainSpec train;
  ObjectReader r(ctx, value, train.path, "the train section");
  r.expect_keys({"epochs", "batch_size_per_replica", "seed", "steps_per_epoch", "log_every_steps", "gradient_accumulation_steps", "deterministic",
                 "eval_batch_size"});
  train.epochs = r.get_int("epochs", train.epochs, 1);
  train.batch_size_per_replica =
      r.get_int("batch_size_per_replica", train.batch_size_per_replica, 1);
  train.seed = static_cast<uint64_t>(r.get_int("seed", static_cast<int64_t>(train.seed), 0));
  train.steps_per_epoch = r.get_int("steps_per_epoch", train.steps_per_epoch, 0);
  train.log_every_steps = r.get_int("log_every_steps", train.log_every_steps, 0);
  train.eval_batch_size = r.get_int("eval_batch_size", train.eval_batch_size, 0);
  train.gradient_accumulation_steps =
      r.get_int("gradient_accumulation_steps", train.gradient_accumulation_steps, 1);
  train.deterministic = r.get_bool("deterministic", train.deterministic);
  r.finish();
  return train;
}

StrategySpec read_strategy(const Context& ctx, const Json& value) {
  StrategySpec strategy;
  ObjectReader r(ctx, value, strategy.path, "the strategy section");
  r.expect_keys({"type", "devices", "replicas", "communication", "bytes_per_pack"});
  strategy.type = r.get_choice("type", strategy.type, kStrategies, "strategy type");
  bool available = false;
  for (const auto& name : kAvailableStrategies) available = available || name == strategy.type;
  if (!available)
    ctx.fail(r.path_of("type"),
             str("'", strategy.type, "' is not available in this version of dtrain; available: ",
                 join(kAvailableStrategies, ", ")));
  const Json* devices = r.find("devices");
  const bool has_replicas = r.has("replicas");
  if ((devices || has_replicas) && strategy.type != "mirrored")
    ctx.fail(r.path_of(devices ? "devices" : "replicas"),
             str("only the mirrored strategy takes several replicas in one process; '", strategy.type,
                 "' runs one replica per task"));
  if (devices && has_replicas)
    ctx.fail(r.path_of("replicas"), "give either 'devices' or 'replicas', not both");
  if (devices) {
    strategy.devices = read_string_list(ctx, *devices, r.path_of("devices"));
    for (size_t i = 0; i < strategy.devices.size(); ++i) {
      const std::string& d = strategy.devices[i];
      if (d.rfind("cpu", 0) != 0 && d.rfind("gpu", 0) != 0 && d.rfind("cuda", 0) != 0)
        ctx.fail(str(r.path_of("devices"), "[", i, "]"),
                 str("'", d, "' is not a device; use names like \"cpu:0\", \"cpu:1\""));
    }
    strategy.replicas = static_cast<int64_t>(strategy.devices.size());
  }
  strategy.replicas = r.get_int("replicas", strategy.replicas, 1);
  const std::string communication =
      r.get_choice("communication", "auto", kCommunications, "communication implementation");
  if (communication == "nccl")
    ctx.fail(r.path_of("communication"),
             "'nccl' is not available yet: no build of dtrain has an NCCL communicator so far (it is planned); "
             "use \"auto\" or \"ring\" (Gloo; a GPU job's gradients then go through host memory)");
  strategy.communication = communication == "ring" ? Communication::kRing : Communication::kAuto;
  strategy.bytes_per_pack = r.get_int("bytes_per_pack", strategy.bytes_per_pack, 0);
  r.finish();
  return strategy;
}

OutputSpec read_output(const Context& ctx, const Json& value) {
  OutputSpec output;
  ObjectReader r(ctx, value, output.path, "the output section");
  r.expect_keys({"dir"});
  if (const Json* dir = r.find("dir")) output.dir = read_string(ctx, *dir, r.path_of("dir"), true);
  r.finish();
  return output;
}

CheckpointSpec read_checkpoint(const Context& ctx, const Json& value) {
  CheckpointSpec ck;
  ObjectReader r(ctx, value, ck.path, "the checkpoint section");
  r.expect_keys({"dir", "every_steps", "every_epochs", "keep", "resume"});
  if (const Json* dir = r.find("dir")) ck.dir = read_string(ctx, *dir, r.path_of("dir"), true);
  ck.every_steps = r.get_int("every_steps", ck.every_steps, 0);
  ck.every_epochs = r.get_int("every_epochs", ck.every_epochs, 0);
  ck.keep = r.get_int("keep", ck.keep, 1);
  ck.resume = r.get_choice("resume", ck.resume, {"never", "auto"}, "resume mode");
  r.finish();
  return ck;
}

// "auto", "cpu", "gpu", "cuda", or one of the last three with ":N" (N up to 4 digits).
bool is_device_name(const std::string& d) {
  if (d == "auto") return true;
  for (const char* kind : {"cpu", "gpu", "cuda"}) {
    const std::string k = kind;
    if (d == k) return true;
    if (d.rfind(k + ":", 0) != 0) continue;
    const std::string digits = d.substr(k.size() + 1);
    return !digits.empty() && digits.size() <= 4 &&
           digits.find_first_not_of("0123456789") == std::string::npos;
  }
  return false;
}

JobConfig read_job(const Context& ctx, const Json& root) {
  JobConfig config;
  config.source = ctx.source;
  ObjectReader r(ctx, root, "", "the job");
  r.expect_keys({"device", "strategy", "model", "loss", "optimizer", "data", "train", "runtime", "output",
                 "checkpoint", "cluster", "task", "rpc_layer"});
  config.device = r.get_string("device", config.device);
  if (!is_device_name(config.device))
    ctx.fail(r.path_of("device"), str("'", config.device,
                                      "' is not a device; use \"auto\" (the GPU when one is usable), \"cpu\", "
                                      "\"gpu\" or \"cuda:N\""));
  if (const Json* v = r.find("strategy")) config.strategy = read_strategy(ctx, *v);
  config.model = read_model(ctx, r.require("model"));
  config.loss = read_loss(ctx, r.require("loss"));
  config.optimizer = read_optimizer(ctx, r.require("optimizer"));
  config.data = read_data(ctx, r.require("data"));
  config.train = read_train(ctx, r.require("train"));
  if (const Json* v = r.find("runtime")) config.runtime = read_runtime(ctx, *v);
  if (const Json* v = r.find("output")) config.output = read_output(ctx, *v);
  if (const Json* v = r.find("checkpoint")) config.checkpoint = read_checkpoint(ctx, *v);
  read_cluster_keys(r, &config.cluster, &config.task);
  r.finish();
  return config;
}

// normalized_json without what may differ between the tasks of one job: the task,
// the device and runtime.threads (an emptied runtime section goes too, so that a task with
// --set runtime.threads=4 agrees with one without a runtime section).
std::string agreement_json(Json root) {
  root.erase("task");
  root.erase("device");  // each machine trains on what it has (a GPU here, the CPU there)
  const auto runtime = root.find("runtime");
  if (runtime != root.end() && runtime->is_object()) {
    runtime->erase("threads");
    runtime->erase("secret_file");  // each machine may keep the secret elsewhere
    if (runtime->empty()) root.erase(runtime);
  }
  const auto checkpoint = root.find("checkpoint");
  if (checkpoint != root.end() && checkpoint->is_object()) {
    checkpoint->erase("resume");  // a resumed run is the same job
    if (checkpoint->empty()) root.erase(checkpoint);
  }
  return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

const std::vector<std::string>& strategy_type_names() { return kStrategies; }
const std::vector<std::string>& available_strategy_type_names() { return kAvailableStrategies; }

JobConfig parse_job_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  Context ctx;
  ctx.source = source;
  Json root = parse_json(text, ctx);
  if (!root.is_object())
    ctx.fail("", str("a job config must be a JSON object {...}, got ", describe(root)));
  apply_overrides(root, overrides, ctx);
  JobConfig config = read_job(ctx, root);
  config.normalized_json = root.dump(-1, ' ', false, Json::error_handler_t::replace);
  config.agreement_json = agreement_json(root);
  return config;
}

JobConfig load_job_config(const std::string& file, const std::vector<std::string>& overrides) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) throw IoError(str("cannot read job config '", file, "': ", std::strerror(errno)));
  std::string text;
  char buffer[65536];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  const int error = errno;
  std::fclose(f);
  if (failed) throw IoError(str("cannot read job config '", file, "': ", std::strerror(error)));
  return parse_job_config(text, file, overrides);
}

}  // namespace dtrain::config
