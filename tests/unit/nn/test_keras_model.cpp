// model.keras_json: the files tf-keras and Keras 3 wrote with model.to_json()
// (tests/fixtures/keras, made by tests/fixtures/make_tf_fixtures.py) build the
// same model as the shipped dtrain job files (layer names, shapes, parameters and
// initial values), Sequential and Functional; unsupported layers and options are
// ConfigErrors naming the file, the layer's place and the option; a file that
// cannot be read is named with the path tried.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/section.h"
#include "core/error.h"
#include "nn/keras_model.h"
#include "nn/model_spec.h"
#include "nn/sequential.h"
#include "support/temp_dir.h"

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

// The Functional GPT (Embedding + keras_hub's PositionEmbedding, causal
// MultiHeadAttention, LayerNormalization, Dense, Add residuals) that tf-keras and
// Keras 3 wrote builds the dtrain model written by hand with Residual blocks:
// the same layers, names, shapes and initial values.
TEST_CASE("Keras' Functional GPT builds the same model as dtrain's Residual blocks", "[keras]") {
  std::ifstream in(kKeras + "gpt_functional_dtrain.json");
  const config::Document doc(std::string(std::istreambuf_iterator<char>(in), {}), "gpt_functional_dtrain.json");
  const nn::ModelSpec from_dtrain = nn::read_model_spec(doc.root());
  const nn::Sequential b(from_dtrain, 7);
  for (const std::string keras_file : {"gpt_functional_tf_keras.json", "gpt_functional_keras3.json"}) {
    INFO(keras_file);
    const nn::ModelSpec from_keras = keras_model(keras_file);
    CHECK(from_keras.input_shape == from_dtrain.input_shape);
    REQUIRE(from_keras.layers.size() == from_dtrain.layers.size());
    const nn::Sequential a(from_keras, 7);
    CHECK(a.summary() == b.summary());
    CHECK(a.params_sha256() == b.params_sha256());
    // The causal mask came from the call (mha(h, h, use_causal_mask=True)), not the layer's config.
    const nlohmann::json model = nlohmann::json::parse(nn::keras_json_to_model_json(
        std::string(std::istreambuf_iterator<char>(std::ifstream(kKeras + keras_file).rdbuf()), {}), keras_file));
    CHECK(model["layers"][2]["layers"][1]["use_causal_mask"] == true);
    CHECK(model["layers"][1]["name"] == "add");
  }
}

// Graphs dtrain does not read, made by editing the Keras 3 GPT: each error names
// the layer and says what dtrain reads instead.
TEST_CASE("Functional graphs that are not residual chains are errors naming the layer", "[keras]") {
  std::ifstream in(kKeras + "gpt_functional_keras3.json");
  const nlohmann::json gpt = nlohmann::json::parse(in);
  auto translate = [](const nlohmann::json& j) { return nn::keras_json_to_model_json(j.dump(), "gpt.json"); };
  // layers: 0 input_layer, 1 embedding, 2 position_embedding, 3 add, 4 layer_normalization,
  // 5 multi_head_attention, 6 add_1, 7 layer_normalization_1, 8 dense, 9 dense_1, 10 add_2, ...
  auto history = [](nlohmann::json& j, size_t layer, size_t arg) -> nlohmann::json& {
    nlohmann::json& args = j["config"]["layers"][layer]["inbound_nodes"][0]["args"];
    nlohmann::json& tensor = args[0].is_array() ? args[0][arg] : args[arg];
    return tensor["config"]["keras_history"][0];
  };
  SECTION("cross-attention") {
    nlohmann::json j = gpt;
    history(j, 5, 1) = "add";
    CHECK_THROWS_WITH(translate(j), Contains("config.layers[5] (MultiHeadAttention 'multi_head_attention')") &&
                                        Contains("attends across 'layer_normalization' and 'add'") &&
                                        Contains("self-attention"));
  }
  SECTION("a path that never rejoins") {
    nlohmann::json j = gpt;
    history(j, 6, 1) = "layer_normalization";  // add_1 = add + layer_normalization; the attention's output unused
    CHECK_THROWS_WITH(translate(j), Contains("config.layers[5] (MultiHeadAttention 'multi_head_attention')") &&
                                        Contains("without an Add joining it back"));
  }
  SECTION("a layer output taken by three layers") {
    nlohmann::json j = gpt;
    history(j, 6, 0) = "embedding";  // add_1 = embedding + attention(norm(add))
    CHECK_THROWS_WITH(translate(j), Contains("config.layers[1] (Embedding 'embedding') is taken by 3 layers"));
  }
  SECTION("an Add of three and a layer called twice") {
    nlohmann::json j = gpt;
    nlohmann::json& args = j["config"]["layers"][6]["inbound_nodes"][0]["args"][0];
    args.push_back(args[0]);
    history(j, 6, 2) = "layer_normalization";
    CHECK_THROWS_WITH(translate(j), Contains("(Add 'add_1') adds 3 tensors"));
    nlohmann::json k = gpt;
    k["config"]["layers"][8]["inbound_nodes"].push_back(k["config"]["layers"][8]["inbound_nodes"][0]);
    CHECK_THROWS_WITH(translate(k), Contains("(Dense 'dense') is called 2 times"));
  }
  SECTION("a cycle, a layer off the path, and a reference to no layer") {
    nlohmann::json j = gpt;
    history(j, 4, 0) = "add_1";  // layer_normalization takes add_1, which its own output feeds
    CHECK_THROWS_AS(translate(j), ConfigError);
    nlohmann::json k = gpt;
    history(k, 2, 0) = "nowhere";
    CHECK_THROWS_WITH(translate(k), Contains("takes 'nowhere', which is no layer of the model"));
  }
  SECTION("call options and layer options dtrain lacks") {
    nlohmann::json j = gpt;
    j["config"]["layers"][5]["inbound_nodes"][0]["kwargs"]["return_attention_scores"] = true;
    CHECK_THROWS_WITH(translate(j), Contains("is called with 'return_attention_scores' = true"));
    nlohmann::json k = gpt;
    k["config"]["layers"][5]["config"]["attention_axes"] = {2};
    CHECK_THROWS_WITH(translate(k), Contains("attention_axes [2] is not supported"));
    nlohmann::json u = gpt;
    u["config"]["layers"][1]["config"]["embeddings_initializer"]["config"]["maxval"] = 0.1;
    CHECK_THROWS_WITH(translate(u), Contains("'embeddings_initializer' has maxval 0.1"));
    nlohmann::json r = gpt;
    r["config"]["layers"][4]["config"]["rms_scaling"] = true;
    CHECK_THROWS_WITH(translate(r), Contains("option 'rms_scaling' = true is not supported"));
    nlohmann::json d = gpt;
    d["config"]["layers"].erase(1);  // integer ids straight into position_embedding
    history(d, 1, 0) = "input_layer";
    history(d, 2, 0) = "input_layer";
    CHECK_THROWS_WITH(translate(d), Contains("takes integer token ids") && Contains("Embedding first"));
  }
  SECTION("attention dropout is read, as the weights' dropout") {
    nlohmann::json j = gpt;
    j["config"]["layers"][5]["config"]["dropout"] = 0.1;
    const nlohmann::json model = nlohmann::json::parse(translate(j));
    CHECK(model["layers"][2]["layers"][1]["dropout"] == 0.1);
    const config::Document doc(model.dump(), "gpt.json");
    CHECK_NOTHROW(nn::Sequential(nn::read_model_spec(doc.root()), 1));
  }
  SECTION("an Add in a Sequential model") {
    const std::string seq = R"({"class_name": "Sequential", "config": {"layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [null, 4]}},
        {"class_name": "Add", "config": {"name": "add"}}]}})";
    CHECK_THROWS_WITH(nn::keras_json_to_model_json(seq, "m.json"), Contains("only a Functional model has one"));
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
    CHECK_THROWS_WITH(translate(j.dump()), Contains("config.layers[2] (Dense 'dense')") &&
                                               Contains("starts a path from 'flatten' that ends at 'dense' without "
                                                        "an Add joining it back"));
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
               "config.layers[0] (Dense '') takes '3'");
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

// A relative model.keras_json is read from the working directory, as the job's
// data paths are; a file that is not there is an IoError naming the path tried,
// and the job file's directory when the file is there instead.
TEST_CASE("a model.keras_json that cannot be read is named with the path tried", "[keras]") {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("jobs"));
  std::filesystem::copy_file(kKeras + "mlp_keras3.json", dir.file("jobs/mlp.json"));
  const std::string cwd = std::filesystem::current_path().string();
  auto read = [](const std::string& keras_json, const std::string& source) {
    const config::Document doc(nlohmann::json{{"keras_json", keras_json}}.dump(), source);
    return nn::read_model_spec(doc.root());
  };
  // Beside the job file but not in the working directory: the fix is named.
  CHECK_THROWS_AS(read("mlp.json", dir.file("jobs/job.json")), IoError);
  CHECK_THROWS_WITH(read("mlp.json", dir.file("jobs/job.json")),
                    Contains("model.keras_json: cannot read 'mlp.json' (" + cwd + "/mlp.json): No such file") &&
                        Contains("a relative path is read from the working directory") &&
                        Contains("the job file's directory has it: write '" + dir.file("jobs/mlp.json") + "'"));
  // Nowhere: no such hint.
  CHECK_THROWS_WITH(read("missing.json", dir.file("jobs/job.json")),
                    Contains("(" + cwd + "/missing.json): No such file") && !Contains("job file's directory has it"));
  // An absolute path is shown as it is, and read.
  CHECK_THROWS_WITH(read(dir.file("jobs/none.json"), "job.json"),
                    Contains("cannot read '" + dir.file("jobs/none.json") + "' (" + dir.file("jobs/none.json") + ")") &&
                        !Contains("relative path"));
  CHECK(read(dir.file("jobs/mlp.json"), "job.json").layers.size() == shipped_model("fashion_mnist_mlp.json").layers.size());
}
