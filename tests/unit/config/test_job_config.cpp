// Tests of parse_job_config / load_job_config on valid jobs: the shipped configs,
// every field set, defaults, shorthand forms, JSON paths, and normalized_json.
#include <catch2/catch.hpp>

#include "job/job_config.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "data/dataset.h"
#include "strategy/registry.h"
#include "config_test_util.h"

namespace dtrain::config::test {
namespace {

using job::JobConfig;
using job::load_job_config;
using job::parse_job_config;
using nn::LayerSpec;
using optim::OptimizerSpec;
using data::DataSourceSpec;

// A layer's options as its type's struct (nn/layers.h).
template <class T>
const T& opt(const LayerSpec& layer) {
  return layer.options_as<T>();
}
std::string act(kernels::Activation a) { return nn::activation_name(a); }

const std::string kConfigs = DTRAIN_SOURCE_DIR "/configs/";

TEST_CASE("the shipped CNN config parses", "[config]") {
  const JobConfig c = load_job_config(kConfigs + "fashion_mnist_cnn.json");
  CHECK(c.source == kConfigs + "fashion_mnist_cnn.json");
  CHECK(strategy::entry_of(c.strategy).name == "one_device");
  CHECK(c.model.input_shape == std::vector<int64_t>{28, 28, 1});
  REQUIRE(c.model.layers.size() == 6);
  const LayerSpec& conv = c.model.layers[0];
  CHECK(conv.type_name() == "Conv2D");
  CHECK(opt<nn::Conv2DOptions>(conv).filters == 32);
  CHECK(opt<nn::Conv2DOptions>(conv).kernel_size[0] == 3);
  CHECK(opt<nn::Conv2DOptions>(conv).kernel_size[1] == 3);
  CHECK(act(opt<nn::Conv2DOptions>(conv).activation) == "relu");
  CHECK(c.model.layers[1].type_name() == "MaxPooling2D");
  CHECK(opt<nn::Pool2DOptions>(c.model.layers[1]).strides[0] == 2);  // defaults to pool_size
  CHECK(opt<nn::DropoutOptions>(c.model.layers[4]).rate == Approx(0.25));
  CHECK(opt<nn::DenseOptions>(c.model.layers[5]).units == 10);
  CHECK(act(opt<nn::DenseOptions>(c.model.layers[5]).activation) == "linear");
  CHECK(c.loss.type->name == "sparse_categorical_crossentropy");
  CHECK(c.loss.from_logits);
  CHECK(c.optimizer.type->name == "adam");
  CHECK(c.optimizer.learning_rate.type->name == "cosine");
  CHECK(c.optimizer.learning_rate.initial_learning_rate == Approx(0.001));
  CHECK(c.optimizer.learning_rate.decay_steps == 12 * 938);  // every step of the 12 epochs
  CHECK(c.data.train.format->name == "idx");
  CHECK_THAT(c.data.train.images, Contains("train-images-idx3-ubyte.gz"));
  CHECK(c.data.has_test);
  CHECK_THAT(c.data.test.labels, Contains("t10k-labels-idx1-ubyte.gz"));
  CHECK(c.train.epochs == 12);
  CHECK(c.train.batch_size_per_replica == 64);
  CHECK(c.output.dir == "runs/fashion_mnist_cnn");
}

TEST_CASE("the shipped MLP config parses", "[config]") {
  const JobConfig c = load_job_config(kConfigs + "fashion_mnist_mlp.json");
  REQUIRE(c.model.layers.size() == 4);
  CHECK(c.model.layers[0].type_name() == "Flatten");
  CHECK(opt<nn::DenseOptions>(c.model.layers[1]).units == 256);
  CHECK(opt<nn::DenseOptions>(c.model.layers[2]).units == 128);
  CHECK(c.data.shuffle_buffer == 60000);
  CHECK(c.train.epochs == 15);
  CHECK(c.optimizer.learning_rate.decay_steps == 15 * 469);  // every step of the 15 epochs
  CHECK(c.train.batch_size_per_replica == 128);
  CHECK(c.normalized_json.find("\"batch_size_per_replica\":128") != std::string::npos);
}

TEST_CASE("every field set to a non-default value is read back", "[config]") {
  const JobConfig c = parse(json::parse(R"({
    "strategy": {"type": "one_device"},
    "model": {"input_shape": [32, 32, 3], "layers": [
      {"type": "Conv2D", "name": "conv", "filters": 8, "kernel_size": [3, 5], "strides": [2, 1],
       "padding": "same", "activation": "tanh", "use_bias": false},
      {"type": "BatchNormalization", "momentum": 0.9, "epsilon": 1e-5, "center": false,
       "scale": false, "axis": -1},
      {"type": "Activation", "activation": "sigmoid"},
      {"type": "MaxPooling2D", "pool_size": [3, 3], "strides": 1, "padding": "same"},
      {"type": "AveragePooling2D", "pool_size": 2, "strides": null},
      {"type": "GlobalAveragePooling2D"},
      {"type": "Flatten"},
      {"type": "Dropout", "rate": 0.5},
      {"type": "Dense", "units": 10, "activation": "softmax", "use_bias": false}
    ]},
    "loss": {"type": "categorical_crossentropy", "from_logits": true},
    "optimizer": {"type": "adamw", "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-8,
                  "weight_decay": 0.01,
                  "learning_rate": {"type": "cosine", "initial_learning_rate": 0.1,
                                    "decay_steps": 1000, "alpha": 0.05, "warmup_steps": 50}},
    "data": {
      "train": {"format": "cifar10", "files": ["a.bin", "b.bin"], "rescale": 0.5, "take": 100},
      "test": {"format": "synthetic", "shape": [32, 32, 3], "count": 20, "classes": 3,
               "seed": 7, "take": 10},
      "shuffle_buffer": 0, "prefetch": 0, "drop_remainder": true, "cache": false},
    "train": {"epochs": 3, "batch_size_per_replica": 16, "seed": 42, "steps_per_epoch": 5,
              "log_every_steps": 0, "eval_batch_size": 64},
    "runtime": {"threads": 3},
    "output": {"dir": "out/run1"}
  })"));
  const auto& L = c.model.layers;
  REQUIRE(L.size() == 9);
  CHECK(L[0].name == "conv");
  CHECK(opt<nn::Conv2DOptions>(L[0]).filters == 8);
  CHECK((opt<nn::Conv2DOptions>(L[0]).kernel_size[0] == 3 && opt<nn::Conv2DOptions>(L[0]).kernel_size[1] == 5));
  CHECK((opt<nn::Conv2DOptions>(L[0]).strides[0] == 2 && opt<nn::Conv2DOptions>(L[0]).strides[1] == 1));
  CHECK(opt<nn::Conv2DOptions>(L[0]).same_padding);
  CHECK(act(opt<nn::Conv2DOptions>(L[0]).activation) == "tanh");
  CHECK_FALSE(opt<nn::Conv2DOptions>(L[0]).use_bias);
  CHECK(opt<nn::BatchNormalizationOptions>(L[1]).momentum == Approx(0.9));
  CHECK(opt<nn::BatchNormalizationOptions>(L[1]).epsilon == Approx(1e-5));
  CHECK_FALSE(opt<nn::BatchNormalizationOptions>(L[1]).center);
  CHECK_FALSE(opt<nn::BatchNormalizationOptions>(L[1]).scale);
  CHECK(act(opt<nn::ActivationOptions>(L[2]).activation) == "sigmoid");
  CHECK((opt<nn::Pool2DOptions>(L[3]).pool_size[0] == 3 && opt<nn::Pool2DOptions>(L[3]).pool_size[1] == 3));
  CHECK((opt<nn::Pool2DOptions>(L[3]).strides[0] == 1 && opt<nn::Pool2DOptions>(L[3]).strides[1] == 1));
  CHECK(opt<nn::Pool2DOptions>(L[3]).same_padding);
  CHECK((opt<nn::Pool2DOptions>(L[4]).strides[0] == 2 && opt<nn::Pool2DOptions>(L[4]).strides[1] == 2));  // null = pool_size
  CHECK(opt<nn::DropoutOptions>(L[7]).rate == Approx(0.5));
  CHECK(act(opt<nn::DenseOptions>(L[8]).activation) == "softmax");
  CHECK_FALSE(opt<nn::DenseOptions>(L[8]).use_bias);
  CHECK(c.loss.type->name == "categorical_crossentropy");
  CHECK(c.loss.from_logits);
  const OptimizerSpec& o = c.optimizer;
  CHECK(o.type->name == "adamw");
  CHECK(o.beta_1 == Approx(0.8));
  CHECK(o.beta_2 == Approx(0.99));
  CHECK(o.epsilon == Approx(1e-8));
  CHECK(o.weight_decay == Approx(0.01));
  CHECK(o.learning_rate.type->name == "cosine");
  CHECK(o.learning_rate.initial_learning_rate == Approx(0.1));
  CHECK(o.learning_rate.decay_steps == 1000);
  CHECK(o.learning_rate.alpha == Approx(0.05));
  CHECK(o.learning_rate.warmup_steps == 50);
  CHECK(c.data.train.format->name == "cifar10");
  CHECK(c.data.train.files == std::vector<std::string>{"a.bin", "b.bin"});
  CHECK(c.data.train.rescale == Approx(0.5));
  CHECK(c.data.train.take == 100);
  REQUIRE(c.data.has_test);
  CHECK(c.data.test.shape == std::vector<int64_t>{32, 32, 3});
  CHECK(c.data.test.count == 20);
  CHECK(c.data.test.classes == 3);
  CHECK(c.data.test.seed == 7);
  CHECK(c.data.test.take == 10);
  CHECK(c.data.shuffle_buffer == 0);
  CHECK(c.data.prefetch == 0);
  CHECK(c.data.drop_remainder);
  CHECK_FALSE(c.data.cache);
  CHECK(c.train.epochs == 3);
  CHECK(c.train.batch_size_per_replica == 16);
  CHECK(c.train.seed == 42);
  CHECK(c.train.steps_per_epoch == 5);
  CHECK(c.train.log_every_steps == 0);
  CHECK(c.train.eval_batch_size == 64);
  CHECK(c.runtime.threads == 3);
  CHECK(c.output.dir == "out/run1");
}

TEST_CASE("an sgd optimizer with a step schedule is read", "[config]") {
  json job = minimal_job();
  job["optimizer"] = json::parse(R"({"type": "sgd", "momentum": 0.9, "nesterov": true,
      "learning_rate": {"type": "step", "initial_learning_rate": 0.5, "decay_steps": 10,
                        "decay_rate": 0.5}})");
  const OptimizerSpec o = parse(job).optimizer;
  CHECK(o.type->name == "sgd");
  CHECK(o.momentum == Approx(0.9));
  CHECK(o.nesterov);
  CHECK(o.learning_rate.path == "optimizer.learning_rate");
  CHECK(o.learning_rate.type->name == "step");
  CHECK(o.learning_rate.initial_learning_rate == Approx(0.5));
  CHECK(o.learning_rate.decay_steps == 10);
  CHECK(o.learning_rate.decay_rate == Approx(0.5));
  CHECK(o.learning_rate.warmup_steps == 0);
}

TEST_CASE("absent keys take their defaults", "[config]") {
  const JobConfig c = parse(minimal_job());
  CHECK(c.source == "job.json");
  CHECK(strategy::entry_of(c.strategy).name == "one_device");
  const LayerSpec& dense = c.model.layers.at(0);
  CHECK(dense.name.empty());
  CHECK(act(opt<nn::DenseOptions>(dense).activation) == "linear");
  CHECK(opt<nn::DenseOptions>(dense).use_bias);
  CHECK(c.loss.type->name == "mse");
  CHECK_FALSE(c.loss.from_logits);
  CHECK(c.optimizer.type->name == "sgd");
  CHECK(c.optimizer.learning_rate.type->name == "constant");
  CHECK(c.optimizer.learning_rate.initial_learning_rate == Approx(0.01));
  CHECK(c.optimizer.momentum == 0.0);
  CHECK_FALSE(c.optimizer.nesterov);
  CHECK(c.data.train.classes == 10);
  CHECK(c.data.train.seed == 0);
  CHECK(c.data.train.take == 0);
  CHECK_FALSE(c.data.has_test);
  CHECK(c.data.shuffle_buffer == 10000);
  CHECK_FALSE(c.data.prefetch.has_value());  // "auto"
  CHECK_FALSE(c.data.drop_remainder);
  CHECK(c.data.cache);
  CHECK(c.train.epochs == 1);
  CHECK(c.train.batch_size_per_replica == 32);
  CHECK(c.train.seed == 1);
  CHECK(c.train.steps_per_epoch == 0);
  CHECK(c.train.log_every_steps == 100);
  CHECK(c.train.eval_batch_size == 0);
  CHECK(c.runtime.threads == 0);
  CHECK(c.output.dir.empty());
}

TEST_CASE("layer defaults of Conv2D and pooling and BatchNormalization", "[config]") {
  json job = minimal_job();
  job["model"]["layers"] = json::parse(R"([
    {"type": "Conv2D", "filters": 4, "kernel_size": 3},
    {"type": "MaxPooling2D", "pool_size": 3},
    {"type": "AveragePooling2D"},
    {"type": "BatchNormalization"}])");
  const auto L = parse(job).model.layers;
  CHECK((opt<nn::Conv2DOptions>(L[0]).strides[0] == 1 && opt<nn::Conv2DOptions>(L[0]).strides[1] == 1));
  CHECK_FALSE(opt<nn::Conv2DOptions>(L[0]).same_padding);
  CHECK(opt<nn::Conv2DOptions>(L[0]).use_bias);
  CHECK((opt<nn::Pool2DOptions>(L[1]).strides[0] == 3 && opt<nn::Pool2DOptions>(L[1]).strides[1] == 3));  // strides default to pool_size
  CHECK((opt<nn::Pool2DOptions>(L[2]).pool_size[0] == 2 && opt<nn::Pool2DOptions>(L[2]).pool_size[1] == 2));
  CHECK((opt<nn::Pool2DOptions>(L[2]).strides[0] == 2 && opt<nn::Pool2DOptions>(L[2]).strides[1] == 2));
  CHECK(opt<nn::BatchNormalizationOptions>(L[3]).momentum == Approx(0.99));
  CHECK(opt<nn::BatchNormalizationOptions>(L[3]).epsilon == Approx(1e-3));
  CHECK(opt<nn::BatchNormalizationOptions>(L[3]).center);
  CHECK(opt<nn::BatchNormalizationOptions>(L[3]).scale);
}

TEST_CASE("data.prefetch is a number of batches or \"auto\" (the default)", "[config]") {
  json job = minimal_job();
  job["data"]["prefetch"] = "auto";
  CHECK_FALSE(parse(job).data.prefetch.has_value());
  job["data"]["prefetch"] = 3;
  CHECK(parse(job).data.prefetch == 3);
  job["data"]["prefetch"] = 0;
  CHECK(parse(job).data.prefetch == 0);
  job["data"]["prefetch"] = "4";  // what --set data.prefetch=4 makes over "auto"
  CHECK(parse(job).data.prefetch == 4);
}

TEST_CASE("idx sources keep relative paths and default rescale", "[config]") {
  json job = minimal_job();
  job["data"]["train"] = {{"format", "idx"}, {"images", "data/img.gz"}, {"labels", "data/lab"}};
  const DataSourceSpec s = parse(job).data.train;
  CHECK(s.images == "data/img.gz");
  CHECK(s.labels == "data/lab");
  CHECK(s.rescale == Approx(1.0 / 255.0));
}

TEST_CASE("loss and optimizer accept their string forms", "[config]") {
  json job = minimal_job();
  job["loss"] = "sparse_categorical_crossentropy";
  job["optimizer"] = "adam";
  JobConfig c = parse(job);
  CHECK(c.loss.type->name == "sparse_categorical_crossentropy");
  CHECK_FALSE(c.loss.from_logits);
  CHECK(c.optimizer.type->name == "adam");
  CHECK(c.optimizer.learning_rate.initial_learning_rate == Approx(0.001));
  CHECK(c.optimizer.beta_1 == Approx(0.9));
  job["optimizer"] = "adamw";
  c = parse(job);
  CHECK(c.optimizer.type->name == "adamw");
  CHECK(c.optimizer.learning_rate.initial_learning_rate == Approx(0.001));
  CHECK(c.optimizer.weight_decay == Approx(0.004));
}

TEST_CASE("an object optimizer without learning_rate gets the type's default", "[config]") {
  json job = minimal_job();
  job["optimizer"] = {{"type", "sgd"}};
  CHECK(parse(job).optimizer.learning_rate.initial_learning_rate == Approx(0.01));
  job["optimizer"] = {{"type", "adam"}, {"learning_rate", 2}};  // an integer is a number too
  CHECK(parse(job).optimizer.learning_rate.initial_learning_rate == Approx(2.0));
}

TEST_CASE("activation null means linear", "[config]") {
  json job = minimal_job();
  job["model"]["layers"][0]["activation"] = nullptr;
  CHECK(act(opt<nn::DenseOptions>(parse(job).model.layers[0]).activation) == "linear");
}

TEST_CASE("data.test null means no test set", "[config]") {
  json job = minimal_job();
  job["data"]["test"] = nullptr;
  CHECK_FALSE(parse(job).data.has_test);
}

TEST_CASE("specs remember their JSON paths", "[config]") {
  json job = minimal_job();
  job["model"]["layers"].push_back({{"type", "Dense"}, {"units", 3}});
  job["data"]["test"] = job["data"]["train"];
  const JobConfig c = parse(job);
  CHECK(c.model.layers[1].path == "model.layers[1]");
  CHECK(c.data.train.path == "data.train");
  CHECK(c.data.test.path == "data.test");
}

TEST_CASE("normalized_json ignores key order and whitespace", "[config]") {
  const std::string a = R"({"train": {"epochs": 2, "seed": 3}, "loss": "mse", "optimizer": "sgd",
    "model": {"layers": [{"units": 2, "type": "Dense"}], "input_shape": [4]},
    "data": {"train": {"count": 8, "format": "synthetic", "shape": [4]}}})";
  const std::string b = R"({
    "data": {"train": {"shape": [4], "format": "synthetic", "count": 8}},
    "model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 2}]},
    "optimizer": "sgd",
    "loss": "mse",
    "train": {"seed": 3, "epochs": 2}
  })";
  const JobConfig ca = parse_job_config(a, "a.json");
  const JobConfig cb = parse_job_config(b, "b.json");
  CHECK(ca.normalized_json == cb.normalized_json);
  CHECK(ca.normalized_json.find(' ') == std::string::npos);
  CHECK(ca.normalized_json.rfind("{\"data\":", 0) == 0);  // keys sorted
}

TEST_CASE("the ResNet benchmark config nests its blocks' layers with their JSON paths", "[config]") {
  const JobConfig c = load_job_config(kConfigs + "bench_resnet_32.json");
  REQUIRE(c.model.layers.size() == 11);
  const LayerSpec& down = c.model.layers[5];
  CHECK(down.type_name() == "Residual");
  CHECK(act(opt<nn::ResidualOptions>(down).activation) == "relu");
  const auto& block = opt<nn::ResidualOptions>(down);
  REQUIRE(block.layers.size() == 5);
  CHECK(block.layers[0].path == "model.layers[5].layers[0]");
  CHECK(opt<nn::Conv2DOptions>(block.layers[0]).strides[0] == 2);
  REQUIRE(block.shortcut.size() == 2);
  CHECK(block.shortcut[0].path == "model.layers[5].shortcut[0]");
  CHECK(opt<nn::Conv2DOptions>(block.shortcut[0]).kernel_size[0] == 1);
  CHECK(opt<nn::ResidualOptions>(c.model.layers[3]).shortcut.empty());  // the identity
}

TEST_CASE("a softmax output layer with a loss from_logits is warned about, as Keras does", "[config]") {
  auto warnings = [](const std::string& layers, const std::string& loss) {
    json job = minimal_job();
    job["model"]["layers"] = json::parse(layers);
    job["loss"] = json::parse(loss);
    return parse(job).warnings;
  };
  const std::string logits = R"({"type": "sparse_categorical_crossentropy", "from_logits": true})";
  const std::vector<std::string> dense =
      warnings(R"([{"type": "Dense", "units": 8, "activation": "relu"},
                   {"type": "Dense", "units": 2, "activation": "softmax", "name": "probs"}])", logits);
  REQUIRE(dense.size() == 1);
  CHECK(dense[0] == "job.json: loss: sparse_categorical_crossentropy has from_logits true, but the model's output "
                    "layer model.layers[1] (Dense 'probs') applies a softmax, so the loss is given probabilities, "
                    "not logits (Keras warns the same); remove the softmax (the usual way: the loss applies it) or "
                    "set from_logits to false");
  const std::vector<std::string> activation =
      warnings(R"([{"type": "Dense", "units": 2}, {"type": "Activation", "activation": "softmax"}])",
               R"({"type": "categorical_crossentropy", "from_logits": true})");
  REQUIRE(activation.size() == 1);
  CHECK_THAT(activation[0], Contains("categorical_crossentropy has from_logits true") &&
                                Contains("model.layers[1] (Activation)"));
  // A linear output with logits, a softmax with probabilities, a softmax before the last layer: fine.
  CHECK(warnings(R"([{"type": "Dense", "units": 2}])", logits).empty());
  CHECK(warnings(R"([{"type": "Dense", "units": 2, "activation": "softmax"}])",
                 R"({"type": "sparse_categorical_crossentropy", "from_logits": false})")
            .empty());
  CHECK(warnings(R"([{"type": "Dense", "units": 2, "activation": "softmax"}, {"type": "Dense", "units": 2}])", logits)
            .empty());
  CHECK(warnings(R"([{"type": "Dense", "units": 2, "activation": "softmax"}])", R"("mse")").empty());
}

}  // namespace
}  // namespace dtrain::config::test
