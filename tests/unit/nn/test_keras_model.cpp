// model.keras_json: the files tf-keras and Keras 3 wrote with model.to_json()
// (tests/fixtures/keras, made by tests/fixtures/make_tf_fixtures.py) build the
// same model as the shipped dtrain job files (layer names, shapes, parameters and
// initial values), Sequential and Functional; unsupported layers and options are
// ConfigErrors naming the file, the layer's place and the option.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/section.h"
#include "core/error.h"
#include "nn/keras_model.h"
#include "nn/model_spec.h"
#include "nn/sequential.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

const std::string kKeras = std::string(DTRAIN_SOURCE_DIR) + "/tests/fixtures/keras/";

nn::ModelSpec shipped_model(const std::string& config) {
  std::ifstream in(std::string(DTRAIN_SOURCE_DIR) + "/configs/" + config);
  const nlohmann::json job = nlohmann::json::parse(in);
  const config::Document doc(job["model"].dump(), config);
  return nn::read_model_spec(doc.root());
}

nn::ModelSpec keras_model(const std::string& file) {
  const config::Document doc(nlohmann::json{{"keras_json", kKeras + file}}.dump(), "job.json");
  return nn::read_model_spec(doc.root());
}

// Keras' JSON with `edit` applied to config.layers[layer].config.
std::string edited(const std::string& file, size_t layer, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(kKeras + file);
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j["config"]["layers"][layer]["config"]);
  return j.dump();
}

}  // namespace

TEST_CASE("Keras' to_json files build the shipped models", "[keras]") {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"mlp_tf_keras.json", "fashion_mnist_mlp.json"},   {"mlp_keras3.json", "fashion_mnist_mlp.json"},
      {"functional_tf_keras.json", "fashion_mnist_mlp.json"}, {"functional_keras3.json", "fashion_mnist_mlp.json"},
      {"cnn_tf_keras.json", "fashion_mnist_cnn.json"},   {"cnn_keras3.json", "fashion_mnist_cnn.json"}};
  for (const auto& [keras_file, config] : pairs) {
    INFO(keras_file);
    const nn::ModelSpec from_keras = keras_model(keras_file);
    const nn::ModelSpec from_dtrain = shipped_model(config);
    CHECK(from_keras.keras_json == kKeras + keras_file);
    CHECK(from_keras.input_shape == from_dtrain.input_shape);
    REQUIRE(from_keras.layers.size() == from_dtrain.layers.size());
    const nn::Sequential a(from_keras, 7), b(from_dtrain, 7);
    // The same layers, Keras' names, shapes and parameter counts, and the same initial values.
    CHECK(a.summary() == b.summary());
    CHECK(a.params_sha256() == b.params_sha256());
  }
}

TEST_CASE("Keras layers and options dtrain lacks are errors naming them", "[keras]") {
  SECTION("an unsupported layer type") {
    CHECK_THROWS_AS(keras_model("unsupported_keras3.json"), ConfigError);
    CHECK_THROWS_WITH(keras_model("unsupported_keras3.json"),
                      Contains("unsupported_keras3.json") && Contains("config.layers[2] (Conv2DTranspose") &&
                          Contains("layer type 'Conv2DTranspose' is not supported") && Contains("Conv2D, Dense"));
  }
  auto translate = [](const std::string& text) { return nn::keras_json_to_model_json(text, "model.json"); };
  SECTION("an option at a value dtrain does not implement") {
    const std::string dilated = edited("cnn_keras3.json", 1, [](auto& c) { c["dilation_rate"] = {2, 2}; });
    CHECK_THROWS_WITH(translate(dilated), Contains("model.json': config.layers[1] (Conv2D 'conv2d')") &&
                                              Contains("option 'dilation_rate' = [2,2] is not supported"));
    const std::string regularized =
        edited("mlp_tf_keras.json", 2, [](auto& c) { c["kernel_regularizer"] = {{"class_name", "L2"}}; });
    CHECK_THROWS_WITH(translate(regularized), Contains("(Dense 'dense')") && Contains("'kernel_regularizer'"));
    const std::string he = edited("mlp_keras3.json", 2, [](auto& c) { c["kernel_initializer"]["class_name"] = "HeNormal"; });
    CHECK_THROWS_WITH(translate(he), Contains("'kernel_initializer' is HeNormal; dtrain initialises it as GlorotUniform"));
    const std::string half = edited("mlp_keras3.json", 2, [](auto& c) { c["dtype"]["config"]["name"] = "mixed_float16"; });
    CHECK_THROWS_WITH(translate(half), Contains("dtype 'mixed_float16' is not supported"));
    const std::string selu = edited("mlp_keras3.json", 2, [](auto& c) { c["activation"] = "selu"; });
    CHECK_NOTHROW(translate(selu));  // the activation name is dtrain's Dense's to check:
    const config::Document doc(translate(selu), "model.json");
    CHECK_THROWS_WITH(nn::read_model_spec(doc.root()), Contains("selu"));
  }
  SECTION("a Functional model that is not one chain, and files that are not models") {
    std::ifstream in(kKeras + "functional_keras3.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["config"]["layers"][3]["inbound_nodes"][0]["args"][0]["config"]["keras_history"][0] = "flatten";
    CHECK_THROWS_WITH(translate(j.dump()), Contains("config.layers[3] (Dense 'dense_1')") &&
                                               Contains("takes flatten, not just 'dense'") && Contains("one chain"));
    CHECK_THROWS_WITH(translate("{\"a\": 1}"), Contains("is not a Keras model"));
    CHECK_THROWS_WITH(translate("{oops"), Contains("is not valid JSON"));
    const config::Document missing(nlohmann::json{{"keras_json", "/nonexistent/model.json"}}.dump(), "job.json");
    CHECK_THROWS_AS(nn::read_model_spec(missing.root()), IoError);
    const config::Document both(nlohmann::json{{"keras_json", kKeras + "mlp_keras3.json"}, {"layers", 1}}.dump(),
                                "job.json");
    CHECK_THROWS_WITH(nn::read_model_spec(both.root()), Contains("layers"));
  }
}

// Found by tests/fuzz/fuzz_keras_model.cpp: values of another type where the file
// should hold an object or a string ended in nlohmann's type_error ("dtrain: error:
// unexpected failure: [json.exception.type_error.306] cannot use value() with
// number", exit 1); numbers past a double's range in its out_of_range error; bytes
// that are not UTF-8 went into the message raw.
TEST_CASE("Keras files with values of the wrong type are ConfigErrors naming the place", "[keras]") {
  auto translate = [](const std::string& text) { return nn::keras_json_to_model_json(text, "model.json"); };
  auto expect_error = [&](const std::string& text, const std::string& what) {
    INFO(text);
    CHECK_THROWS_AS(translate(text), ConfigError);
    CHECK_THROWS_WITH(translate(text), Contains("model.keras_json: 'model.json'") && Contains(what));
  };
  const std::string dense = R"({"class_name": "Dense", "config": {"name": "d", "units": 2}})";
  auto model = [](const std::string& layers, const std::string& extra = "") {
    return R"({"class_name": "Sequential", "config": {"layers": [)" + layers + "]" + extra + "}}";
  };
  expect_error(R"({"class_name": "Sequential", "config": 3})", "config is a number 3, not an object");
  expect_error(R"({"class_name": "Sequential", "config": null})", "config is null, not an object");
  expect_error(R"({"class_name": 7, "config": {}})", "class_name is a number 7");
  expect_error(R"({"class_name": "Sequential", "config": {"layers": {"a": 1}}})", "config.layers is an object");
  expect_error(model("null"), "config.layers[0] is null, not a layer object");
  expect_error(model("3, " + dense), "config.layers[0] is a number 3, not a layer object");
  expect_error(model(R"({"class_name": ["Dense"]})"), "config.layers[0] has a class_name that is an array");
  expect_error(model(R"({"config": {}})"), "config.layers[0] has no class_name");
  expect_error(model(R"({"class_name": "Dense", "config": "units"})"), "has a config that is a string \"units\"");
  expect_error(model(R"({"class_name": "Dense", "config": {"units": 2, "dtype": {"config": 5}}})"),
               "dtype '{\"config\":5}' is not supported");
  expect_error(model(R"({"class_name": "Dense", "config": {"units": 2, "kernel_initializer": 3}})"),
               "option 'kernel_initializer' is 3; dtrain initialises it as GlorotUniform only");
  expect_error(model(R"({"class_name": "Dense", "config": {"units": 2, "kernel_initializer": {"class_name": null}}})"),
               "option 'kernel_initializer' is {\"class_name\":null}");
  // A Functional model: a layer name or a keras_history entry that is not a string.
  expect_error(R"({"class_name": "Functional", "config": {"layers": [{"class_name": "Dense", "name": 5,
                  "config": {"units": 2}, "inbound_nodes": [{"args": [{"config": {"keras_history": [3, 0, 0]}}]}]}]}})",
               "config.layers[0] (Dense '') takes 3");
  expect_error(R"({"class_name": "Functional", "config": {"layers": [)" + dense + R"(], "output_layers": 1}})",
               "config.output_layers 1 is not the last layer");
  // Not JSON, or numbers JSON allows but a double cannot hold.
  expect_error("{\"class_name\": 1e400}", "is not valid JSON (number overflow parsing '1e400')");
  expect_error("{\"a\": \"\xff\xfe\"}", "is not valid JSON");
  try {
    translate("{\"a\": \"\xff\xfe\"}");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains("\\xff"));  // escaped, not the raw bytes
    CHECK(std::string(e.what()).find('\xff') == std::string::npos);
  }
  // An option name with a control character is quoted escaped.
  expect_error(model(R"({"class_name": "Dense", "config": {"units": 2, "a\u0007": 1}})"),
               "option 'a\\x07' = 1 is not supported");
}
